"""The error types the CLI turns into exit codes.

- :class:`UserError`: bad input (spec, config, checkpoint, arguments). One line per
  problem, naming the file and key or tensor; the CLI prints them and exits 2.
- :class:`IncompleteCheckpoint`: ``inspect`` found missing/unexpected/mis-shaped tensors;
  exit 1 after printing the report.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input. ``problems`` are one-line messages, each naming its file and key/tensor."""

    def __init__(self, *problems: str):
        self.problems = [p for p in problems if p] or ["unknown error"]
        super().__init__("\n".join(self.problems))


class IncompleteCheckpoint(UserError):
    """A checkpoint does not map completely onto the target layout."""
