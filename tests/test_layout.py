"""The package's shape: pyproject's package list matches the folders, no import cycle, stages
that import downward only, no in-function imports of the package's own modules, and a plain
checkout imports without an install (``PYTHONPATH=<checkout>``, as the GPU machine and the
benches run it)."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
TOPS = {"draftsmith": "draftsmith", "draftsmith.framework": "framework", "draftsmith.transforms": "transforms",
        "draftsmith.lowering": "lowering", "draftsmith.adapters": "adapters"}


def package_dirs() -> dict[str, Path]:
    """Package name -> folder, for every folder with an ``__init__.py`` under the mapped roots."""
    out = {}
    for name, top in TOPS.items():
        for init in sorted((ROOT / top).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / top)
            out[".".join([name, *rel.parts])] = init.parent
    return out


@functools.lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    """Module name -> file of every module of the package (``pkg`` for ``pkg/__init__.py``)."""
    out = {}
    for pkg, d in package_dirs().items():
        for f in d.glob("*.py"):
            out[pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"] = f
    return out


#: The functions allowed to import the package's own modules (their imports count as the
#: module's own for the cycle check): none. The command line loads a command's module from its
#: table (``cli/main.py``'s ``COMMANDS``, ``draftsmith.registry.load``) when the command runs.
DEFERRED: set[tuple[str, str]] = set()


@functools.lru_cache(maxsize=None)
def imports(name: str, path: Path, top_level: bool) -> list[tuple[str, int]]:
    """``(imported module, line)`` of the package's own modules imported by ``name``:
    module-level statements (``top_level``, with those of its :data:`DEFERRED` function) or
    those inside other functions (not)."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    known = modules()
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and (name, n.name) not in DEFERRED]
    inside = {id(n) for f in funcs for n in ast.walk(f) if n is not f}
    out = []
    for node in ast.walk(tree):
        if (id(node) in inside) == top_level:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                target = f"{mod}.{alias.name}" if f"{mod}.{alias.name}" in known else mod
                if target in known:
                    out.append((target, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name in known]
    return out


def test_pyproject_packages_match_folders():
    cfg = PYPROJECT["tool"]["setuptools"]
    assert sorted(cfg["packages"]) == sorted(package_dirs())
    assert cfg["package-dir"] == TOPS


def test_no_import_cycle():
    mods = modules()
    graph = {m: sorted({t for t, _ in imports(m, p, True) if t != m}) for m, p in mods.items()}
    # a package imports its parents' __init__ first: that edge is no cycle of ours
    graph = {m: [t for t in ts if not m.startswith(t + ".")] for m, ts in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str):
        state[m] = 1
        stack.append(m)
        for t in graph.get(m, []):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


#: The layers, lowest first; a module may import its own layer and those below, never a later
#: one. The product's stages run spec < compile < convert < runtime < emit < eval < cli < docs;
#: ``starter`` (the starter-spec inferrer ``init`` runs) reads specs, compile's families and
#: checkpoints, and sits just below the command line.
#: Beneath them the shared layers, ranked by what imports them today: the package root (its
#: version), the registry, ``errors``, ``io`` (files and processes: it knows no stage) and
#: ``layer_ranges`` are used by every stage and import only each other; ``transforms`` (weight
#: ops), ``lowering`` (attention kernels) and ``adapters`` (the YAML folder) import only the
#: registry, and ``spec`` is the first stage to import them. ``__main__`` (the entry point) sits
#: on top. Keys are module-name prefixes below ``draftsmith.``; the longest matching one wins.
LAYERS = (
    ("shared", ("", "registry", "framework", "framework.errors", "framework.io", "framework.layer_ranges")),
    ("ops", ("transforms", "lowering", "adapters")),
    ("spec", ("framework.spec",)),
    ("compile", ("framework.compile",)),
    ("convert", ("framework.convert",)),
    ("runtime", ("framework.runtime",)),
    ("emit", ("framework.emit",)),
    ("eval", ("framework.eval",)),
    ("starter", ("framework.starter",)),
    ("cli", ("framework.cli",)),
    ("docs", ("framework.docs",)),
    ("entry", ("__main__",)),
)


def layer_of(module: str) -> tuple[int, str]:
    """``(rank, layer name)`` of ``module`` (a ``draftsmith.`` name) by its longest :data:`LAYERS` prefix."""
    rel = module.removeprefix("draftsmith").removeprefix(".")
    best = None
    for rank, (layer, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if rel == prefix or rel.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), rank, layer)
    if best is None:
        raise AssertionError(f"{module}: in no layer of LAYERS (tests/test_layout.py): give it a rank")
    return best[1], best[2]


#: Upward imports still to be removed, ``(module, imported)``; each entry must still occur (a stale
#: one fails). None: the command line names ``docs`` in its table as a string, never imports it.
KNOWN_UPWARD: set = set()


def upward_imports(edges, known=frozenset()) -> list[str]:
    """One line per import of a later layer among ``edges`` (``(module, file, line, imported)``),
    those in ``known`` (``(module, imported)``) left out:
    ``file:line: module imports imported: from-layer -> to-layer``."""
    out = []
    for module, path, line, target in edges:
        (src, src_name), (dst, dst_name) = layer_of(module), layer_of(target)
        if dst > src and (module, target) not in known:
            out.append(f"{path}:{line}: {module} imports {target}: {src_name} -> {dst_name} (a later stage)")
    return out


def test_every_module_has_a_layer():
    for m in modules():
        layer_of(m)


def own_imports() -> list[tuple[str, Path, int, str]]:
    """``(module, file, line, imported)`` of every import of the package's own modules, at module
    level or inside functions."""
    return [(m, p.relative_to(ROOT), line, t) for m, p in sorted(modules().items())
            for top_level in (True, False) for t, line in imports(m, p, top_level)]


def test_stages_import_downward_only():
    found = upward_imports(own_imports(), KNOWN_UPWARD)
    assert not found, "imports of a later stage (stages import downward only):\n" + "\n".join(found)


def test_known_upward_imports_still_exist():
    present = {(m, t) for m, _, _, t in own_imports()}
    assert KNOWN_UPWARD <= present, f"no longer imported, remove from KNOWN_UPWARD: {KNOWN_UPWARD - present}"


def test_upward_import_check_names_the_import():
    edges = [("draftsmith.framework.compile.adapter", "framework/compile/adapter.py", 24,
              "draftsmith.framework.convert.plan"),
             ("draftsmith.framework.convert.plan", "framework/convert/plan.py", 9,
              "draftsmith.framework.compile.resolved"),
             ("draftsmith.framework.io.publish", "framework/io/publish.py", 3, "draftsmith.framework.spec.loading"),
             ("draftsmith.framework.cli.main", "framework/cli/main.py", 5, "draftsmith.framework.docs")]
    assert upward_imports(edges) == [
        "framework/compile/adapter.py:24: draftsmith.framework.compile.adapter imports "
        "draftsmith.framework.convert.plan: compile -> convert (a later stage)",
        "framework/io/publish.py:3: draftsmith.framework.io.publish imports draftsmith.framework.spec.loading: "
        "shared -> spec (a later stage)",
        "framework/cli/main.py:5: draftsmith.framework.cli.main imports draftsmith.framework.docs: "
        "cli -> docs (a later stage)",
    ]
    known = {("draftsmith.framework.cli.main", "draftsmith.framework.docs")}
    assert len(upward_imports(edges, known)) == 2  # the known one left out, no other
    assert layer_of("draftsmith") == (0, "shared") and layer_of("draftsmith.__main__")[1] == "entry"
    assert layer_of("draftsmith.framework.errors") == (0, "shared")
    assert layer_of("draftsmith.framework.eval.command")[1] == "eval"


def test_no_function_level_imports_of_own_modules():
    found = [f"{p.relative_to(ROOT)}:{line}: {t}" for m, p in modules().items() for t, line in imports(m, p, False)]
    assert not found, "imports of draftsmith modules inside functions:\n" + "\n".join(found)


def test_plain_checkout_imports_without_install():
    code = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        "import draftsmith.framework.cli.main, draftsmith.framework.runtime, draftsmith.lowering\n"
        "from pathlib import Path\n"
        f"assert Path(draftsmith.framework.__file__).resolve().parent == Path({str(ROOT / 'framework')!r})\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


PRODUCT_FOLDERS = ("draftsmith", "framework", "transforms", "lowering", "adapters")


def lab_imports(path: Path) -> list[int]:
    """Lines of ``path`` that import the lab wing (``lab``, ``lab.x``) or one of its modules by
    their bare names (the lab's scripts put ``lab/`` on ``sys.path``)."""
    lab_names = {"lab"} | {p.stem for p in (ROOT / "lab").glob("*.py")}
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(n.split(".")[0] in lab_names for n in names):
            out.append(node.lineno)
    return out


def test_product_imports_nothing_from_the_lab():
    found = [f"{f.relative_to(ROOT)}:{line}" for top in PRODUCT_FOLDERS for f in sorted((ROOT / top).rglob("*.py"))
             for line in lab_imports(f)]
    assert not found, "product modules import the lab wing:\n" + "\n".join(found)


def test_lab_import_check_sees_an_import(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("import os\nfrom lab.gluon_ab import kernel_at\nimport wave_fit\n")
    assert lab_imports(planted) == [2, 3]


def test_product_suite_does_not_collect_the_lab_tests():
    ini = PYPROJECT["tool"]["pytest"]["ini_options"]
    assert ini["testpaths"] == ["tests"] and "lab" in ini["norecursedirs"]
    assert not list((ROOT / "tests").rglob("test_gluon_ab.py"))  # the lab's tests live in lab/tests
    assert (ROOT / "lab" / "tests" / "test_gluon_ab.py").is_file()
