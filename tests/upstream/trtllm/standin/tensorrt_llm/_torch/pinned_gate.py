"""Whether this stand-in plays the old release (no draft-model registry). Suite-internal."""

from ..pinned import is_old

OLD = is_old()
