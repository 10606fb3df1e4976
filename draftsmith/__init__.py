"""draftsmith: declarative adapters that serve speculative-decoding drafters on TensorRT-LLM.

The code lives in four packages mapped from the repository root (see pyproject.toml):
``draftsmith.framework`` (``framework/``: spec, compile, convert, io, runtime, emit, eval,
starter, cli, docs), ``draftsmith.transforms`` (``transforms/``), ``draftsmith.lowering`` (``lowering/``)
and ``draftsmith.adapters`` (``adapters/*.yaml``).

Run from a plain checkout (no install, ``PYTHONPATH=.``), this package's ``__path__`` also
holds the repository root, so ``draftsmith.framework`` etc. resolve to the top-level folders
exactly as the install maps them.
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

_ROOT = _Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "framework" / "__init__.py").is_file():
    if str(_ROOT) not in __path__:
        __path__.append(str(_ROOT))
