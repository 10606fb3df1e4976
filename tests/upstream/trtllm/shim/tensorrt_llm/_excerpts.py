"""Executes TensorRT-LLM's excerpts once for this process (tests/upstream/trtllm/excerpts.py
finds them): the shim's modules re-export from here. The DFlash / DSpark excerpts get the stand-in
registry (a transcription: ``get_model_architecture``, ``register_draft_model``) in place of the
loader's stubs, and their real module names, so the builders land in the registry as built-ins."""

import sys
from pathlib import Path

import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import excerpts  # noqa: E402


def export(module_globals, ns, names):
    for n in names:
        module_globals[n] = ns[n]


ld = excerpts.loader()
SRC = excerpts.src_dir()
cu = ld.config_utils(transformers)
la = ld.llm_args()
wk = ld.worker()
mu = ld.modeling_utils()

from tensorrt_llm._torch.models import modeling_utils as _registry  # noqa: E402  (stand-in; imports modules.linear)

df = excerpts.run_patched(ld, ld.dflash, cu, module_name="tensorrt_llm._torch.models.modeling_dflash",
                          stub_get_model_architecture=_registry.get_model_architecture,
                          register_draft_model=_registry.register_draft_model)
ds = excerpts.run_patched(ld, ld.dspark, cu, df, module_name="tensorrt_llm._torch.models.modeling_dspark",
                          register_draft_model=_registry.register_draft_model)
