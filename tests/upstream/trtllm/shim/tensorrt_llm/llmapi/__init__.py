"""Import shim (see tensorrt_llm/__init__.py): this package's modules, then standin/tensorrt_llm/llmapi."""
from pathlib import Path as _Path

__path__.append(str(_Path(__file__).resolve().parents[3] / "standin" / "tensorrt_llm" / "llmapi"))
