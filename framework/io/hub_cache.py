"""Resolving ``org/name[@revision]`` inside the local Hugging Face cache, and nowhere else.

The cache layout (``huggingface_hub``'s): ``<cache>/models--org--name/refs/<branch>`` holds a
commit hash; ``snapshots/<hash>/`` the files. :func:`snapshot_folder` resolves a revision with
no path taken from the user: a revision is one or more components of ``[A-Za-z0-9_.-]``
(``refs/pr/1``), never ``.``/``..``, never absolute; the ref file is read through the
hardened reader (a regular file, at most :data:`MAX_REF_BYTES`: a FIFO or ``/dev/zero`` planted
there is refused, never opened or read); the hash must be 40 hex digits; the snapshot must be
a real folder inside the repo's cache folder. Every refusal is one line naming the key.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Optional

from ..errors import UserError
from .safe_read import read_limited

#: a ref file holds one commit hash
MAX_REF_BYTES = 256
_COMPONENT = re.compile(r"^[A-Za-z0-9_.-]+$")
_HASH = re.compile(r"^[0-9a-f]{40}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def default_cache_dir() -> str:
    """huggingface_hub's cache folder (``HF_HUB_CACHE`` / ``HF_HOME`` as it reads them)."""
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def check_revision(revision: str, key: str, shown: str) -> None:
    """One-line :class:`UserError` unless ``revision`` is a safe relative ref name."""
    parts = revision.split("/")
    if revision.startswith("/") or any(p in ("", ".", "..") or not _COMPONENT.match(p) for p in parts):
        raise UserError(f"{key}={shown}: revision {revision!r} must be a branch, tag or commit name "
                        "(letters, digits, _ . -, parts separated by /; no '..', no absolute path)")


def snapshot_folder(repo_id: str, revision: Optional[str], cache_dir: Optional[str], key: str = "source") -> Path:
    """The snapshot folder of ``repo_id`` at ``revision`` (default ``main``) in ``cache_dir``
    (default: :func:`default_cache_dir`); :class:`UserError` when absent or unsafe."""
    shown = f"{repo_id}@{revision}" if revision else repo_id
    if not _REPO.match(repo_id) or ".." in repo_id.split("/"):
        raise UserError(f"{key}={shown}: not a Hugging Face repo id (org/name)")
    revision = revision or "main"
    check_revision(revision, key, shown)
    cache = Path(cache_dir or default_cache_dir())
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    where = f"{key}={shown}"
    if _HASH.match(revision):
        commit = revision
    else:
        ref = repo / "refs" / revision
        if not os.path.lexists(ref):
            raise FileNotFoundError(str(ref))
        text = read_limited(ref, MAX_REF_BYTES, "a Hugging Face ref").decode("ascii", "replace").strip()
        if not _HASH.match(text):
            raise UserError(f"{where}: {ref} does not hold a commit hash")
        commit = text
    snap = repo / "snapshots" / commit
    try:
        st = os.lstat(snap)
    except OSError:
        raise FileNotFoundError(str(snap)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{where}: {snap} is not a folder")
    real_repo, real_snap = os.path.realpath(repo), os.path.realpath(snap)
    if os.path.dirname(os.path.dirname(real_snap)) != real_repo:
        raise UserError(f"{where}: {snap} lies outside the cache folder {repo}")
    return snap
