"""The TensorRT-LLM release this stand-in plays and the suite pins as draftsmith's supported
minimum. Not a TensorRT-LLM module: the suite's own constant (CONTRACT.md, "Version floor")."""

PINNED_MINIMUM_VERSION = "1.4.0rc1"
# The release the suite plays as "too old": before the draft-model registry refactor
# (register_draft_model / get_registered_draft_model_builder) and the modeling_dspark split.
OLD_VERSION = "1.3.0rc27"


def is_old() -> bool:
    import os

    return os.environ.get("DS_STANDIN_TRTLLM_VERSION", PINNED_MINIMUM_VERSION) == OLD_VERSION
