"""``emit model=``: the target model a drafter is served with, as ``trtllm-serve`` takes it, and the
architecture its ``config.json`` names (the package's ``target_architecture``)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError
from ..io.safe_read import load_json
from ..runtime.target_folder import target_folder


def serving_target(text: str, key: str = "model") -> tuple[str, str]:
    """``(model, architecture)`` of ``key=text`` (a folder, a model root, or a repo id in the local
    Hugging Face cache): ``model`` is the resolved folder, or the repo id as given (``trtllm-serve``
    resolves it the same way); ``architecture`` is its ``config.json``'s ``architectures[0]``."""
    folder = target_folder(text, key)
    cfg = load_json(folder / "config.json", what=f"{key}={text}")
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    if not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
        raise UserError(f"{key}={text}: {folder / 'config.json'}: `architectures` is not a non-empty list of "
                        "names, so it names no architecture for target_architecture")
    local = Path(os.path.expanduser(text)).exists()
    return (str(folder.resolve()) if local else text), archs[0]
