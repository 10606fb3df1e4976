"""Stand-in ``tensorrt_llm`` package root (see PROVENANCE.md).

``__version__``: the pinned minimum by default; the suite sets ``DS_STANDIN_TRTLLM_VERSION`` to
play an older release. Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/version.py (``__version__``).
"""

import os

from .pinned import PINNED_MINIMUM_VERSION

__version__ = os.environ.get("DS_STANDIN_TRTLLM_VERSION", PINNED_MINIMUM_VERSION)
