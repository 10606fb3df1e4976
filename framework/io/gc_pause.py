"""Pausing Python's cyclic garbage collector while a bulk step allocates many small objects.

Reading a 100 000-tensor header and planning it allocate hundreds of thousands of dicts,
tuples and dataclasses that all stay alive; each automatic collection would walk every
one of them again, which made those steps several times slower than their work. The
objects hold no reference cycles that need collecting before the step ends; collection
resumes (and runs as usual) afterwards, also when the step raises.
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused_gc():
    """Automatic cyclic collection off inside the block (nested blocks keep it off)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
