"""Import shim (see tensorrt_llm/__init__.py): this package's modules, then standin/tensorrt_llm/_torch/speculative."""
from pathlib import Path as _Path

__path__.append(str(_Path(__file__).resolve().parents[4] / "standin" / "tensorrt_llm" / "_torch/speculative"))
