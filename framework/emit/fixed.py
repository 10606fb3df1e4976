"""The Python files of every emitted package: constant text, the same for every adapter.

Nothing from a spec, a config or a checkpoint is ever part of them; the package's data is its
``resolved.json``, read and validated at import by :func:`draftsmith.framework.emit.runtime.install`.
"""

DRAFTER_PY = '''"""A TensorRT-LLM custom model module written by ``draftsmith emit``.

This text is the same for every adapter. The drafter it serves is data: ``resolved.json``
beside this file, read and validated by the installed draftsmith when this module is
imported, which then registers the drafter's backbone and draft-model builder with
TensorRT-LLM. Re-emit after changing the adapter.
"""

from pathlib import Path

from draftsmith.framework.emit.runtime import install

INSTALLED = install(Path(__file__).resolve().parent, __name__)
ARCHITECTURE = INSTALLED.architecture
DRAFTER = INSTALLED.drafter
MAX_DRAFT_LEN = INSTALLED.max_draft_len
DraftsmithDrafter = INSTALLED.drafter_class
build_draft_model = INSTALLED.builder
'''

INIT_PY = '''"""A package written by ``draftsmith emit`` (see ``drafter.py``; its data: ``resolved.json``)."""

from .drafter import ARCHITECTURE, DRAFTER, MAX_DRAFT_LEN, DraftsmithDrafter, build_draft_model

__all__ = ["ARCHITECTURE", "DRAFTER", "MAX_DRAFT_LEN", "DraftsmithDrafter", "build_draft_model"]
'''

#: file name -> text of every Python file an emitted package holds.
PYTHON_FILES = {"__init__.py": INIT_PY, "drafter.py": DRAFTER_PY}
