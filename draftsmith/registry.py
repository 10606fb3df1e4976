"""The one registry helper: a closed, named table (families, transforms, lowerings, rename
kinds, export formats, hosts), and :func:`load`, the one way an entry names code that is
imported on first use (a lowering's kernel, a command of the command line).

A :class:`Registry` is a ``dict`` (name -> entry) that refuses a second registration under
one name and answers an unknown name with ``unknown <kind> '<name>'; known: a, b``.
``builtins`` names the package whose import registers the built-in entries; it is imported
on first lookup (so a registry module never imports its members at load time: that would
be an import cycle, since members import the registry to register themselves).
"""

from __future__ import annotations

import importlib
from typing import Generic, Optional, TypeVar

T = TypeVar("T")


class Registry(dict, Generic[T]):
    """``kind``: what the entries are (for messages); ``builtins``: package to import first."""

    def __init__(self, kind: str, builtins: Optional[str] = None):
        super().__init__()
        self.kind = kind
        self.builtins = builtins

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` under ``name``; a name registered twice is a ``ValueError``."""
        if name in self:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self[name] = entry
        return entry

    def lookup(self, name: str) -> T:
        """The entry named ``name``; an unknown name is a ``KeyError`` listing the known ones."""
        if self.builtins is not None:
            importlib.import_module(self.builtins)
        try:
            return self[name]
        except (KeyError, TypeError):
            raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self))}") from None


def load(package: str, ref: str):
    """The object ``ref`` (``"module:name"``) names in ``package``; the module is imported on
    this call, not before. ``ref`` is ours (a registry entry's), never a string from a spec."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(f"{package}.{module}"), name)
