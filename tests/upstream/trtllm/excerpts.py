"""Where the suite finds TensorRT-LLM's own source: the verbatim excerpts and their ``loader.py``
in ``$DRAFTSMITH_TRTLLM_SRC`` (default ``../shared/trtllm_src`` beside the checkout). Nothing here
re-implements TensorRT-LLM; tests that need the excerpts skip in one line naming the variable."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[3]
ENV = "DRAFTSMITH_TRTLLM_SRC"
#: the statement PR #17935 changes (NVIDIA/TensorRT-LLM #17935 "Optimize DFlash draft forward",
#: merged 2026-08-18, DFlashForCausalLM._get_attention_mask_args), and what it becomes there
D70A2287_CAUSAL = "causal = self._sliding_layers_causal or sliding_window is not None"
PR17935_CAUSAL = "causal = self._sliding_layers_causal"


def src_dir() -> Optional[Path]:
    """The excerpt folder, or None when it is absent."""
    d = Path(os.environ.get(ENV) or (REPO.parent / "shared" / "trtllm_src")).resolve()
    return d if (d / "loader.py").is_file() else None


def skip_reason() -> str:
    return f"TensorRT-LLM excerpts not found: set {ENV} to the trtllm_src folder (default ../shared/trtllm_src)"


def require() -> Path:
    d = src_dir()
    if d is None:
        import pytest

        pytest.skip(skip_reason())
    return d


def skip_if_driver_lacked_them(result: dict) -> None:
    """Skip (one line, naming the variable) when a driver process's ``result`` failed only because the
    excerpts are absent here; with the excerpts present every result is left to the test."""
    if src_dir() is None and skip_reason() in json.dumps(result):
        import pytest

        pytest.skip(skip_reason())


def loader():
    """The excerpts' ``loader`` module (imported from the excerpt folder)."""
    d = require() if "pytest" in sys.modules else src_dir()
    if d is None:
        raise RuntimeError(skip_reason())
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))
    return importlib.import_module("loader")


def run_patched(ld, build, *args, module_name=None, text_patch=None, **loader_globals):
    """``build(*args)`` (a ``loader`` function) with, for its duration: ``loader_globals`` in place of
    the loader's stubs of the same names (e.g. a transcribed registry for ``register_draft_model``),
    the executed excerpt's ``__name__`` set to ``module_name`` (its real module path, so registries
    that look at ``__module__`` see a built-in), and ``text_patch = (old, new)`` applied once to the
    excerpt text. Everything else is the loader's."""
    orig_exec = ld._exec
    saved = {k: getattr(ld, k) for k in loader_globals}

    def patched(fname, ns, text=None, tag=None):
        if module_name:
            ns.setdefault("__name__", module_name)
        if text_patch:
            _, src = ld._source(fname)
            old, new = text_patch
            assert src.count(old) == 1, f"{fname}: the statement to patch is not there once: {old}"
            text, tag = src.replace(old, new), "patched"
        return orig_exec(fname, ns, text, tag)

    ld._exec = patched
    for k, v in loader_globals.items():
        setattr(ld, k, v)
    try:
        return build(*args)
    finally:
        ld._exec = orig_exec
        for k, v in saved.items():
            setattr(ld, k, v)


def dflash_variant(ld, cu, rule: str):
    """The modeling_dflash excerpt executed as at d70a2287 (``rule="d70a2287"``) or with PR #17935's
    ``_get_attention_mask_args`` statement (``rule="pr17935"``: that one statement replaced, the
    rest verbatim)."""
    if rule == "d70a2287":
        return ld.dflash(cu)
    if rule != "pr17935":
        raise ValueError(rule)
    return run_patched(ld, ld.dflash, cu, text_patch=(D70A2287_CAUSAL, PR17935_CAUSAL))
