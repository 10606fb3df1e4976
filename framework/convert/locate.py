"""Where a drafter checkpoint lives: ``source=`` resolved to a folder holding its config.json.

``source=`` may be

- a local folder holding the drafter (``config.json`` + safetensors);
- a model root as downloaded, holding the drafter in a subfolder an adapter declares in
  ``match.subfolders`` (``<MiniMax checkpoint>/dspark``): the subfolder is used whenever it
  holds a ``config.json``, and the root's own ``config.json`` (the target's) is never read as
  the drafter's;
- a Hugging Face repo id ``org/name`` or ``org/name@revision``, resolved from the local
  Hugging Face cache only (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else the default), with
  ``huggingface_hub``'s cache API; nothing is downloaded.

A folder ``draftsmith convert`` wrote is refused as a source ("already converted").
This is the one resolver of checkpoint locations (``target=`` of other commands may use it).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from ..errors import UserError
from ..io.safe_read import MAX_CONFIG_BYTES, file_kind, is_regular, load_json
from ..io.hub_cache import snapshot_folder  # bounded: a revision never leaves the cache

#: ``org/name`` or ``org/name@revision`` (Hugging Face's repo-id characters).
REPO_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*)(?:@(?P<rev>[A-Za-z0-9_./-]+))?$")


@dataclass(frozen=True)
class Located:
    """A resolved checkpoint folder and how it was found (for a one-line note)."""

    path: Path
    how: str = ""  # "" (as given), or e.g. "drafter subfolder dspark/", "Hugging Face cache"


def hub_cache_dir() -> Optional[str]:
    """The Hugging Face hub cache folder the environment names (read at call time), or None
    for huggingface_hub's own default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def from_hub_cache(repo_id: str, revision: Optional[str], key: str = "source") -> Path:
    """The cached snapshot folder of ``repo_id`` at ``revision`` (default: ``main``); no network."""
    shown = f"{repo_id}@{revision}" if revision else repo_id
    try:
        return snapshot_folder(repo_id, revision, hub_cache_dir(), key=key)
    except (FileNotFoundError, ValueError, OSError):
        where = hub_cache_dir() or "the default Hugging Face cache (~/.cache/huggingface/hub)"
        raise UserError(f"{key}={shown}: not a local folder, and no snapshot of {shown} in {where} "
                        "(draftsmith never downloads: fetch it with `hf download` first)") from None


def converted_by(folder: Path) -> Optional[str]:
    """"draftsmith <version> with <adapter>" when ``folder`` is a converted checkpoint, else None."""
    try:  # the hardened reader: a FIFO or device named config.json is refused, never opened
        raw = load_json(folder / "config.json", MAX_CONFIG_BYTES, "config.json")
    except (UserError, OSError, ValueError):
        return None
    section = raw.get("draftsmith") if isinstance(raw, dict) else None
    if not isinstance(section, dict):
        return None
    version = "?"
    try:
        version = load_json(folder / ".draftsmith-output", 4096, "marker").get("version", "?")
    except (UserError, OSError, ValueError, AttributeError):
        pass
    return f"draftsmith {version} with {section.get('adapter', '?')}"


def locate(text: str, subfolders: Iterable[str] = (), key: str = "source", allow_converted: bool = False) -> Located:
    """Resolve ``key=text`` to a checkpoint folder (see the module docstring). ``subfolders``:
    where drafters may sit under a model root (the adapters' ``match.subfolders``)."""
    path, how = given_folder(text, key)
    path, sub = drafter_folder(path, text, subfolders, key)
    how = ", ".join(h for h in (how, sub) if h)
    if not allow_converted:
        by = converted_by(path)
        if by is not None:
            raise UserError(f"{key}={text}: already converted by {by} (use it as draft checkpoint= or serve it; "
                            "convert the original checkpoint instead)")
    return Located(path, how)


def given_folder(text: str, key: str = "source") -> tuple[Path, str]:
    """``key=text`` as a folder: a local path, else a Hugging Face repo id's cached snapshot;
    with how it was found ("" or "Hugging Face cache")."""
    path, how = Path(os.path.expanduser(text)), ""
    if not path.exists():
        m = REPO_ID.match(text)
        if m is None:
            raise UserError(f"{key}={text}: no such folder")
        path, how = from_hub_cache(m["repo"], m["rev"], key), "Hugging Face cache"
        check_revision_files(path, f"{key}={text}")
    if not path.is_dir():
        raise UserError(f"{key}={text}: not a folder")
    return path, how


#: most entries (files and folders) of a cached revision walked; real drafters hold a few dozen
MAX_REVISION_ENTRIES = 100_000
#: deepest folder nesting of a cached revision walked
MAX_REVISION_DEPTH = 32


def check_revision_files(snapshot: Path, where: str) -> None:
    """Refuse, before anything in it is opened, a cached revision holding anything but folders and
    regular files: a FIFO (held open by a writer or not), device or socket anywhere in it, also
    behind a symbolic link (``stat`` follows links and never opens or blocks). Links are not
    walked into; dangling ones are left to the reader. Bounded: :data:`MAX_REVISION_ENTRIES`
    entries, :data:`MAX_REVISION_DEPTH` levels. One line naming the entry."""
    todo, seen = [(snapshot, 0)], 0
    while todo:
        folder, depth = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as e:
            raise UserError(f"{where}: {folder}: cannot be listed ({e.strerror or e})") from None
        for entry in entries:
            seen += 1
            if seen > MAX_REVISION_ENTRIES:
                raise UserError(f"{where}: {snapshot} holds more than {MAX_REVISION_ENTRIES} entries; refused")
            try:
                mode = os.stat(entry.path).st_mode
            except (OSError, ValueError):
                continue  # dangling link: the reader that needs the file says so
            if stat.S_ISDIR(mode):
                if not entry.is_symlink():
                    if depth + 1 > MAX_REVISION_DEPTH:
                        raise UserError(f"{where}: {entry.path}: folders nested deeper than {MAX_REVISION_DEPTH} "
                                        "levels; refused")
                    todo.append((Path(entry.path), depth + 1))
            elif not stat.S_ISREG(mode):
                raise UserError(f"{where}: {entry.path}: is {file_kind(mode)} in the cached revision, not a regular "
                                "file; refused (nothing in the revision was opened)")


def drafter_folder(path: Path, text: str, subfolders: Iterable[str], key: str = "source") -> tuple[Path, str]:
    """The drafter's folder in ``path``: a declared subfolder holding a ``config.json`` (a model
    root as downloaded: the target's ``config.json`` beside it is never read as the drafter's),
    else ``path`` itself. Returns the folder and how it was found ("" or "drafter subfolder NAME/")."""
    names = list(dict.fromkeys(subfolders))
    found = [s for s in names if is_regular(path / s / "config.json")]
    if len(found) > 1:
        raise UserError(f"{key}={text}: holds several drafters ({', '.join(found)}): name one, e.g. "
                        f"{key}={path / found[0]}")
    if found:
        return path / found[0], f"drafter subfolder {found[0]}/"
    return path, ""


def no_subfolder_hint(folder: Path, subfolders: Iterable[str]) -> str:
    """For an error about ``folder``'s ``config.json`` that no adapter serves: the drafter
    subfolders looked for in it (a model root whose drafter is not there), or "" when
    ``folder`` is itself such a subfolder or none is declared."""
    names = list(dict.fromkeys(subfolders))
    if not names or folder.name in names:
        return ""
    return f" (nor a model root holding its drafter: no {', '.join(n + '/' for n in names)} in it)"
