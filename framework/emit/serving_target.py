"""``emit model=``: the target model a drafter is served with, as ``trtllm-serve`` takes it, the
architecture its ``config.json`` names (the package's ``target_architecture``), and the sequence
length TensorRT-LLM serves it at by default."""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..errors import UserError
from ..io.safe_read import load_json
from ..runtime.target_folder import target_folder


def serving_target(text: str, key: str = "model") -> tuple[str, str, dict]:
    """``(model, architecture, config)`` of ``key=text`` (a folder, a model root, or a repo id in the
    local Hugging Face cache): ``model`` is the resolved folder, or the repo id as given
    (``trtllm-serve`` resolves it the same way); ``architecture`` is its ``config.json``'s
    ``architectures[0]``; ``config`` that config.json."""
    folder = target_folder(text, key)
    cfg = load_json(folder / "config.json", what=f"{key}={text}")
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    if not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
        raise UserError(f"{key}={text}: {folder / 'config.json'}: `architectures` is not a non-empty list of "
                        "names, so it names no architecture for target_architecture")
    local = Path(os.path.expanduser(text)).exists()
    return (str(folder.resolve()) if local else text), archs[0], cfg


def default_max_seq_len(cfg: dict) -> int:
    """The ``max_seq_len`` TensorRT-LLM serves a target of config ``cfg`` at when none is given:
    ``max_position_embeddings`` (2048 without it), times the RoPE scaling ``factor`` unless the
    scaling type is ``su``, ``longrope``, ``llama3`` or ``yarn`` (NVIDIA/TensorRT-LLM
    ``tensorrt_llm/_torch/models/modeling_utils.py``, ``DecoderModelForCausalLM.infer_max_seq_len``,
    stored file id 5772362611; multimodal targets ask their language model, here ``text_config``).
    The scaling is read from ``rope_scaling``, or transformers 5's ``rope_parameters``."""
    text = cfg.get("text_config")
    c = text if isinstance(text, dict) else cfg
    scaling = c.get("rope_scaling") or c.get("rope_parameters")
    factor = 1
    if isinstance(scaling, dict) and scaling.get("type", scaling.get("rope_type")) not in ("su", "longrope", "llama3",
                                                                                             "yarn"):
        factor = scaling.get("factor", 1.0)
    length = c.get("max_position_embeddings") or 2048
    ok = type(length) is int and length > 0 and type(factor) in (int, float) and factor > 0
    return int(math.ceil(length * factor)) if ok and factor != 1 else (length if ok else 0)
