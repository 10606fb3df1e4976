"""Run the serving engines' own config readers (vLLM, SGLang) from their wheels' Python files.

The files come from the released wheels (``pip download --no-deps`` + unzip of ``*.py``, see
``.ci/run``) into ``$DRAFTSMITH_READERS_SRC`` (default ``.readers-src/`` in the repository):
``vllm-0.33.0/vllm/...`` and ``sglang-0.5.23/sglang/...``. Nothing of theirs is copied into
this repository. Two ways of running their code, both executing their source text:

- :func:`real_module`: a module imported from its file, its package ``__init__`` files not
  run (they import the whole engine: compiled ops, CUDA); imports it makes that the
  extracted files cannot satisfy are given by :class:`Stub` modules that name what they
  replace;
- :func:`defs`: chosen top-level functions, classes and constants of one file, parsed with
  ``ast`` and executed (under the file's own name, so tracebacks point into it) in a
  namespace holding the file's stdlib imports plus the names the caller passes: the
  caller's stubs for layers and kernels (each a recorder, see :class:`Recorder`).
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib.abc
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any, Iterable

import pytest

REPO = Path(__file__).resolve().parents[3]
ENV = "DRAFTSMITH_READERS_SRC"
VLLM = "vllm==0.33.0"
SGLANG = "sglang==0.5.23"


def src_root(wheel: str) -> Path:
    """The extracted ``*.py`` tree of ``wheel`` (``vllm==0.33.0``): its folder holding the
    top-level package; skips the test in one line when absent."""
    base = Path(os.environ.get(ENV) or REPO / ".readers-src")
    name, version = wheel.split("==")
    root = base / f"{name}-{version}"
    if not (root / name).is_dir():
        pytest.skip(f"{wheel}'s Python files are not extracted at {root} (set {ENV}; .ci/run extracts them)")
    return root


class NotRead(LookupError):
    """The engine reads the exported format with code this crosscheck does not build (or not
    at all): the message says which, in one line."""


class Stub(types.ModuleType):
    """A module standing in for one the extracted files cannot import (compiled ops, the
    engine's runtime): ``replaces`` says which and why; it holds only the names given."""

    def __init__(self, name: str, replaces: str, **names: Any):
        super().__init__(name)
        self.__replaces__ = replaces
        self.__dict__.update(names)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``pkg.*`` in ``root``: packages get a ``__path__`` but their ``__init__`` is not
    run; modules load from their file; names in ``stubs`` are the stubs."""

    def __init__(self, root: Path, pkg: str, stubs: dict[str, types.ModuleType]):
        self.root, self.pkg, self.stubs = root, pkg, stubs

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.stubs:
            return importlib.util.spec_from_loader(fullname, _Given(self.stubs[fullname]))
        if fullname != self.pkg and not fullname.startswith(self.pkg + "."):
            return None
        p = self.root.joinpath(*fullname.split("."))
        if p.is_dir():
            spec = importlib.util.spec_from_loader(fullname, _Given(types.ModuleType(fullname)), is_package=True)
            spec.submodule_search_locations = [str(p)]
            return spec
        if p.with_suffix(".py").is_file():
            return importlib.util.spec_from_file_location(fullname, p.with_suffix(".py"))
        return None


class _Given(importlib.abc.Loader):
    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        pass


def real_module(root: Path, dotted: str, stubs: Iterable[Stub] = ()) -> types.ModuleType:
    """Import ``dotted`` from the extracted tree ``root`` (its package ``__init__`` files not
    run), ``stubs`` standing in for what it imports that the tree cannot give. The modules
    are removed from ``sys.modules`` afterwards (the returned one keeps working)."""
    pkg = dotted.split(".")[0]
    stubs = {s.__name__: s for s in stubs}
    finder = _Finder(root, pkg, stubs)
    before = set(sys.modules)
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(dotted)
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            if name == pkg or name.startswith(pkg + ".") or name in stubs:
                del sys.modules[name]


def _stdlib(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] in sys.stdlib_module_names for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in sys.stdlib_module_names | {"__future__"}
    return False


def _name(node: ast.stmt) -> str | None:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


@functools.lru_cache(maxsize=None)
def _parsed(path: str) -> ast.Module:
    return ast.parse(Path(path).read_text(), path)


def defs(path: Path, names: Iterable[str], namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Execute the top-level definitions ``names`` of ``path`` (``Class.method``: that method
    alone, as a function named ``Class_method``) (in file order, after the file's
    stdlib imports) in ``namespace`` (the names they use that the file imports from elsewhere)
    and return it. A name the file does not define at top level is an error."""
    names = list(names)
    tree = _parsed(str(path))
    picked = [n for n in tree.body if _name(n) in names]
    for dotted in [n for n in names if "." in n]:  # Class.method: the method as a plain function
        cls, meth = dotted.split(".")
        for c in tree.body:
            if isinstance(c, ast.ClassDef) and c.name == cls:
                for m in c.body:
                    if isinstance(m, ast.FunctionDef) and m.name == meth:
                        f = copy.deepcopy(m)
                        f.name = f"{cls}_{meth}"
                        f.decorator_list = []
                        picked.append(f)
    missing = set(names) - {_name(n) for n in picked} - {n for n in names if "." in n and
                                                         n.replace(".", "_") in {_name(p) for p in picked}}
    if missing:
        raise LookupError(f"{path}: no top-level {', '.join(sorted(missing))}")
    module = ast.Module(body=[n for n in tree.body if _stdlib(n)] + picked, type_ignores=[])
    ns = namespace if namespace is not None else {}
    name = f"_readers_src.{Path(path).with_suffix('').as_posix().replace('/', '.').replace('-', '_')}"
    holder = types.ModuleType(name)  # dataclasses look the defining module up in sys.modules
    holder.__dict__.update(ns)
    sys.modules[name] = holder
    try:
        exec(compile(module, str(path), "exec"), holder.__dict__)
    finally:
        del sys.modules[name]
    ns.update(holder.__dict__)
    return ns


def imported_names(path: Path) -> list[str]:
    """The names ``path`` binds by importing from outside the stdlib (top-level imports)."""
    out = []
    for n in _parsed(str(path)).body:
        if isinstance(n, (ast.Import, ast.ImportFrom)) and not _stdlib(n):
            out += [(a.asname or a.name).split(".")[0] for a in n.names]
    return out


def with_recorders(path: Path, names: Iterable[str], namespace: dict[str, Any] | None = None,
                   base: type | None = None) -> dict[str, Any]:
    """:func:`defs`, every name ``path`` imports from outside the stdlib standing in as a
    :func:`recorder` of that name (on ``base``) unless ``namespace`` gives it (``torch``, say)."""
    ns = {k: recorder(k, base or Recorder) for k in imported_names(path)}
    ns.update(namespace or {})
    return defs(path, names, ns)


def norm_styles(layers, model, styles: dict[str, str]) -> dict[str, str]:
    """Norm kind -> the style the built ``model`` applies (``styles``: engine norm class ->
    style), over every layer: a kind whose layers differ reads ``mixed [...]``."""
    per = {"input_layernorm": lambda l: l.input_layernorm, "post_attention_layernorm": lambda l: l.post_attention_layernorm,
           "q_norm": lambda l: l.self_attn.q_norm, "k_norm": lambda l: l.self_attn.k_norm}
    out = {}
    for kind, get in per.items():
        got = [styles[type(get(l)).kind] for l in layers]
        out[kind] = got[0] if len(set(got)) == 1 else f"mixed {got}"
    out["hidden_norm"] = styles[type(model.hidden_norm).kind]
    out["norm"] = styles[type(model.norm).kind]
    return out


class Recorder:
    """A stand-in layer (linear, norm, attention, RoPE, ...) of an engine: it records the
    arguments the engine's model code built it with and holds nothing else. ``kind`` names the
    engine class it replaces."""

    kind = "?"

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __repr__(self):
        return f"<{self.kind} stand-in {self.args} {self.kwargs}>"


def recorder(kind: str, base: type = Recorder) -> type:
    """A :class:`Recorder` subclass standing in for engine class ``kind`` (``base``: e.g.
    ``torch.nn.Module`` where the engine's code registers it as a submodule)."""
    if base is Recorder:
        return type(kind, (Recorder,), {"kind": kind})

    def init(self, *args, **kwargs):
        base.__init__(self)
        self.args, self.kwargs = args, kwargs

    return type(kind, (base,), {"kind": kind, "__init__": init})


class Obj(types.SimpleNamespace):
    """A plain attribute bag for the engine objects the readers are handed (a vLLM
    ``VllmConfig`` slice, a parallel state): only the attributes the caller sets."""


# ---- the comparison ------------------------------------------------------------------------------


_EXPORTS: dict = {}


def load_and_account(model, folder, loads: dict, shards: dict, skip=frozenset()) -> tuple[dict, list[str]]:
    """Every ``*.safetensors`` tensor of ``folder`` through ``model.load_weights`` (the reader's own),
    with ``loads`` filled by its recording weight loader (``id(tensor) -> (param, shard)``): (checkpoint
    name -> the parameter it reached, ``[shard]`` appended, or None; parameters left without their
    shards, ``shards`` naming a fused parameter's by its module name, ``skip`` those not the checkpoint's)."""
    from safetensors.torch import load_file

    tensors = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(f))
    model.load_weights(iter(tensors.items()))
    names = {id(p): n for n, p in model.named_parameters()}
    weights, got = {}, {}
    for n, t in tensors.items():
        if id(t) in loads:
            param, shard = loads[id(t)]
            weights[n] = names[id(param)] + ("" if shard is None else f"[{shard}]")
            got.setdefault(names[id(param)], set()).add(shard)
        else:
            weights[n] = None
    unloaded = [n for n, _ in model.named_parameters() if n not in skip and
                got.get(n, set()) != shards.get(n.split(".")[-2], {None})]
    return weights, unloaded


def planted(tmp_path, folder, edit):
    """A copy of the exported ``folder`` whose ``config.json`` went through ``edit`` (a planted difference)."""
    import json
    import shutil

    d = tmp_path / "planted"
    shutil.copytree(folder, d)
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def trtllm_dflash_source(tmp_path_factory, wheel: str):
    """``(adapter, source folder, record)`` of a tiny trtllm_dflash checkpoint (a non-causal window and a
    full layer), the source both readers' planted-difference tests export."""
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.convert.plan import plan
    from draftsmith.framework.convert.synth import synthesize

    src_root(wheel)
    root = tmp_path_factory.mktemp(f"{wheel}-planted")
    a = load_adapter("trtllm_dflash")
    synthesize(a, "tiny", root / "s", seed=3)
    return a, root / "s", plan(a, root / "s").resolved


def check_export(checkpoints, source: str, to: str, wheel: str, read, reader: str):
    """What ``read`` (a reader module's ``read``) makes of ``source`` exported ``to=to``, after checking it
    runs what the record says (no :func:`differences`); ``None`` where the export refuses, which must be
    one line a problem, each naming the target; a skip where the reader has no model for the format."""
    from draftsmith.framework.errors import UserError

    src_root(wheel)
    try:
        out, r, target = exported(checkpoints, source, to)
    except UserError as e:  # the export's own answer
        lines = "\n".join(e.args).splitlines()
        assert lines and all(line.startswith("to=") for line in lines), e.args
        return None
    try:
        theirs = read(out)
    except NotRead as e:
        pytest.skip(str(e))
    assert differences(theirs, ours(r, target), reader) == []
    return theirs


def exported(checkpoints, source: str, to: str):
    """``(folder, record, target adapter)`` of the session checkpoint ``source`` exported
    ``to=to`` (cached for the session: both readers' tests read the same folders), or the
    export's :class:`UserError` raised again."""
    import atexit
    import shutil
    import tempfile

    from draftsmith.framework.convert.export import export, resolve_target
    from draftsmith.framework.convert.plan import plan
    from draftsmith.framework.errors import UserError

    key = (source, to)
    if key not in _EXPORTS:
        ck = checkpoints(source)
        r = plan(ck.adapter, ck.source).resolved
        d = Path(tempfile.mkdtemp(prefix="draftsmith-readers-"))
        atexit.register(shutil.rmtree, d, True)
        try:
            out = export(ck.adapter, ck.source, d / "x", to, verifier="example-org/verifier-8b")
            _EXPORTS[key] = (out, r, resolve_target(to, r))
        except UserError as e:
            _EXPORTS[key] = e
    got = _EXPORTS[key]
    if isinstance(got, Exception):
        raise got
    return got


def export_targets(adapter_dir=None) -> list[str]:
    """Every ``to=`` an adapter declares an ``export:`` section for (its alias, else its name)."""
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.spec.loading import adapter_files

    out = set()
    for name in adapter_files(adapter_dir):
        spec = load_adapter(name, adapter_dir=adapter_dir).spec
        if "export" in spec.model_fields_set:
            out.add(spec.export.alias or name)
    return sorted(out)


def ours(r, target) -> dict:
    """What draftsmith's record ``r`` of the source says the reader must run for the export
    to adapter ``target``: the masks, the norm styles the export stored the norms for
    (``target.norm_styles()``), RoPE, ids and sizes. Keys as :func:`readers_vllm.read`."""
    return {
        "serves": True,
        "layers": [(m.causal, m.window) for m in r.masks],
        "norms": {k: target.norm_styles()[k] for k in r.norms},
        "qk_norm": r.qk_norm,
        "rope": (r.rope.theta, r.rope.type, r.dims.rotary_dim),
        "rope_neox": True,  # the family's rotate-half RoPE (reference section 3)
        "mask_token_id": r.mask_token_id,
        "sample_from_anchor": r.sample_from_anchor,
        "target_layer_ids": tuple(r.target_layer_ids),
        "fc_in": r.dims.target_hidden * len(r.target_layer_ids),
        "draft_tokens": r.max_draft_len,
        "block_size": r.block_size,
        "value_scale": None,  # folded into o_proj by the export
        "hidden_act": {"swiglu": "silu", "swiglu_oai": "swigluoai"}[r.mlp.kind],
    }


def differences(theirs: dict, expected: dict, reader: str) -> list[str]:
    """One line per key both hold where the reader would run something else (a reader's
    ``None`` for ``draft_tokens`` / ``block_size`` means the user passes it: not compared);
    ``weights``: every tensor must land in a module of the reader's model."""
    out = []
    for k, v in expected.items():
        if k not in theirs or theirs[k] is None and k in ("draft_tokens", "block_size", "sample_from_anchor"):
            continue
        if theirs[k] != v:
            out.append(f"{reader}: {k}: runs {theirs[k]!r}, draftsmith's record says {v!r}")
    lost = sorted(n for n, p in theirs.get("weights", {}).items() if p is None)
    if lost:
        out.append(f"{reader}: weights: {', '.join(lost)} load into nothing")
    return out


def dflash2_ours(r) -> dict:
    """What draftsmith's record ``r`` of a DFlash 2 drafter says a reader must run, keyed as
    ``readers_vllm.dflash2`` / ``readers_sglang.dflash2``: the convolutions (taps, group size,
    the block they are local to), the selector (rank, top-k), the unary knobs (multiplier, soft
    cap; the order is checked by running the readers' candidate code), the embedding scale, the
    masks, ids, draft length, block size, and no parameter left without a tensor."""
    d = r.dflash2
    return {"conv": {(d.conv.kernel_size, d.conv.group_size, r.block_size)},
            "selector": (d.selector.rank, d.selector.top_k),
            "unary": (d.selector.unary.multiplier, d.selector.unary.softcap),
            "input_embedding_scale": d.input_embedding_scale,
            "layers": [(m.causal, m.window) for m in r.masks],
            "mask_token_id": r.mask_token_id, "target_layer_ids": tuple(r.target_layer_ids),
            "draft_tokens": r.max_draft_len, "block_size": r.block_size, "unloaded": []}
