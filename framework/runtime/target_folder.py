"""``target=`` of ``draft`` and ``eval``: the target model's folder, resolved one way for both.

``target=`` may be

- a folder holding the target's ``config.json`` and weights; a model root as downloaded is
  one (its ``config.json`` is the target's; the drafter sits in a subfolder);
- a Hugging Face repo id ``org/name`` or ``org/name@revision`` already in the local cache
  (resolved as ``convert source=`` resolves it: :func:`~..convert.locate.given_folder`;
  nothing is downloaded).

A converted drafter is refused as a target. Without ``target=``, the target of a
``checkpoint=`` is the model root it named (the drafter found in a subfolder), else the
``target/`` folder beside the drafter's files (``draftsmith synth``'s layout). Every error
names the argument.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..convert.locate import converted_by, given_folder
from ..errors import UserError
from ..io.safe_read import is_regular

FORMS = "the target model's folder, a model root as downloaded, or a repo id in the local Hugging Face cache"


def target_folder(text: str, key: str = "target") -> Path:
    """``key=text`` resolved to the target's folder (see the module docstring)."""
    path, _ = given_folder(str(text), key)
    if not is_regular(path / "config.json"):
        raise UserError(f"{key}={text}: no config.json in {path} (expected {FORMS})")
    by = converted_by(path)
    if by is not None:
        raise UserError(f"{key}={text}: a drafter converted by {by}, not its target (pass it as checkpoint=; "
                        f"target= is {FORMS})")
    return path


def default_target(checkpoint_text: str, drafter: Path, key: str = "checkpoint") -> Optional[Path]:
    """The target when no ``target=`` is given: the model root ``key=checkpoint_text`` named
    (``drafter``, its resolved folder, is a subfolder of it), else ``drafter/target`` when it
    holds a ``config.json`` (synth's layout), else None."""
    root, _ = given_folder(str(checkpoint_text), key)
    if Path(drafter) != root:
        return root
    guess = Path(drafter) / "target"
    return guess if is_regular(guess / "config.json") else None


def missing_target(command: str, checkpoint_text: str) -> UserError:
    """The one-line error when no target is given and none follows from ``checkpoint=``."""
    return UserError(f"draftsmith {command}: missing target= ({FORMS}); checkpoint={checkpoint_text} is no model "
                     "root holding its drafter in a subfolder, nor a folder with a target/ beside it")
