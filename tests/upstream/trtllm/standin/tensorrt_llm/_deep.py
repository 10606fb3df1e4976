"""Executes TensorRT-LLM's verbatim excerpts (``$DRAFTSMITH_TRTLLM_SRC/deep``, found by the suite's
``excerpts.py``) inside the stand-in modules that used to transcribe them, so ``tensorrt_llm.mapping``,
``tensorrt_llm._torch.modules.linear`` and ``DecoderModelForCausalLM.load_weights`` are TensorRT-LLM's
own text here too. Not a TensorRT-LLM module. The names each excerpt imports are supplied by the
caller (stubs listed in PROVENANCE.md, the same ones ``deep/loader.py`` gives); an absent excerpt folder
is an ImportError carrying the suite's one-line skip reason."""

import __future__
import functools
import importlib.util
import sys
from pathlib import Path

SUITE = Path(__file__).resolve().parents[2]  # tests/upstream/trtllm (excerpts.py)


def loader():
    """``deep/loader.py`` as a module, not installed (its ``torch_proxy`` and stub classes are used)."""
    mod = sys.modules.get("_trtllm_deep_loader")
    if mod is not None:
        return mod
    if str(SUITE) not in sys.path:
        sys.path.insert(0, str(SUITE))
    import excerpts

    src = excerpts.src_dir()
    if src is None:
        raise ImportError(excerpts.skip_reason())
    spec = importlib.util.spec_from_file_location("_trtllm_deep_loader", src / "deep" / "loader.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["_trtllm_deep_loader"] = mod
    return mod


def run(fname: str, namespace: dict, future_annotations: bool = False) -> dict:
    """Execute ``deep/<fname>`` in ``namespace`` (a module's globals, or a private dict)."""
    path = Path(loader().HERE) / fname
    exec(_code(str(path), path.read_text(encoding="utf-8"), future_annotations), namespace)
    return namespace


@functools.lru_cache(maxsize=None)
def _code(path: str, source: str, future_annotations: bool):
    """The excerpt compiled once a process (a driver executes each excerpt afresh for every
    package it loads); keyed by its text, so an edited excerpt compiles again."""
    flags = __future__.annotations.compiler_flag if future_annotations else 0
    return compile(source, path, "exec", flags=flags, dont_inherit=True)
