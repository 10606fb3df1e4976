"""The API of TensorRT-LLM's drafter classes as pinned by the excerpts, and the attributes a piece
of draftsmith code uses on them, both read from source (``ast``); nothing is executed here.

Pinned surface of a class: its definitions in the excerpt (methods, class attributes, every
``self.<name> =`` / ``register_buffer("<name>")`` in its methods), the names its ``# [omitted: ...]``
comments list (``loader.omitted_names``, transcribed from the full file at the same commit), its
excerpted bases' surfaces and ``torch.nn.Module``'s attributes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

#: excerpt file -> classes whose surface it pins, with their excerpted bases
PINNED = {
    "DFlashForCausalLM": ("modeling_dflash_excerpt.py", ()),
    "_DSparkHeadMixin": ("modeling_dspark_excerpt.py", ()),
    "GQADSparkForCausalLM": ("modeling_dspark_excerpt.py", ("_DSparkHeadMixin", "DFlashForCausalLM")),
}
#: parameter names that hold the drafter instance in draftsmith's run-time helpers
#: (framework/emit/*.py: ``BoundDrafter.dflash_forward(self, model, ...)``, ``_compiled(drafter)``)
DRAFTER_PARAMS = ("model", "drafter")


def _class_node(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise KeyError(name)


def defined_names(cls: ast.ClassDef) -> set:
    """Methods, class attributes and instance attributes a class body defines."""
    names = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    for node in ast.walk(cls):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    names.add(sub.attr)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register_buffer" and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(node.args[0].value)
    return names


def omitted(src_dir: Path, loader, fname: str, cls: ast.ClassDef) -> set:
    """``loader.omitted_names``; for a class defined without parentheses (``class _DSparkHeadMixin:``,
    which that function's ``class NAME(`` split cannot find) the same comments read over the class's
    own lines, up to the next top-level statement."""
    try:
        return loader.omitted_names(fname, cls.name)
    except IndexError:
        lines = (src_dir / fname).read_text().splitlines()
        end = cls.end_lineno
        while end < len(lines) and (not lines[end].strip() or lines[end].startswith((" ", "\t"))):
            end += 1
        text = "\n".join(lines[cls.lineno - 1:end])
        names = set()
        for m in re.finditer(r"# \[omitted:([^\]]*)\]", text, re.S):
            names.update(n.strip().strip("#").strip() for n in m.group(1).replace("\n", " ").split(","))
        return {n for n in names if n}


def pinned_surface(src_dir: Path, loader, class_name: str) -> set:
    import torch

    fname, bases = PINNED[class_name]
    tree = ast.parse((src_dir / fname).read_text())
    node = _class_node(tree, class_name)
    names = defined_names(node) | omitted(src_dir, loader, fname, node)
    for b in bases:
        names |= pinned_surface(src_dir, loader, b)
    return names | set(dir(torch.nn.Module)) | set(vars(torch.nn.Module(), ))


def _own_names(tree: ast.AST) -> set:
    """Names draftsmith itself puts on its drafter subclass: the keys of a class body built with
    ``type(name, bases, body)`` (a ``dict(...)`` call or a dict literal, direct or through a variable)
    and instance entries written as ``vars(obj)["name"]``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            names.update(k.arg for k in node.keywords if k.arg)
        if isinstance(node, ast.Dict):
            names.update(k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "vars"
                and isinstance(node.slice, ast.Constant)):
            names.add(node.slice.value)
    return names


def _builds_type(fn: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "type" and len(n.args) == 3
               for n in ast.walk(fn))


def uses_on_drafter(path: Path, drafter_bases: set) -> list:
    """``(line, attribute, where)`` for each attribute read or written on a drafter instance in the
    file at ``path``. Drafter instances: ``self`` / ``super()`` in a class deriving one of
    ``drafter_bases``; ``self`` of a function nested in one that builds a class with
    ``type(name, bases, body)`` (draftsmith's subclass made at import); unannotated parameters named
    in :data:`DRAFTER_PARAMS` (an annotated one, e.g. ``drafter: PackagedDrafter``, is not the
    engine's object). Names draftsmith's own subclass defines (its class body, a ``type()`` body,
    ``vars(obj)["name"]``) are left out."""
    tree = ast.parse(path.read_text())
    own_everywhere = _own_names(tree)
    out = []

    def visit(fn, roots, own):
        for node in ast.walk(fn):
            if not isinstance(node, ast.Attribute):
                continue
            v = node.value
            hit = (isinstance(v, ast.Name) and v.id in roots) or (
                isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super")
            if hit and node.attr not in own and node.attr not in own_everywhere:
                out.append((node.lineno, node.attr, f"{path.name}:{fn.name}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if bases & drafter_bases:
                own = defined_names(node)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        visit(item, {"self"}, own)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args + node.args.kwonlyargs
            params = {a.arg for a in args if a.arg in DRAFTER_PARAMS and a.annotation is None}
            if params:
                visit(node, params, set())
            if _builds_type(node):
                for inner in ast.walk(node):
                    if (inner is not node and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))
                            and inner.args.args and inner.args.args[0].arg == "self"):
                        visit(inner, {"self"}, set())
    return out
