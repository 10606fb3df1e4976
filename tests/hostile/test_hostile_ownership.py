"""Only what draftsmith made (issue 46, point 1): folders whose names match draftsmith's temp,
backup and scratch patterns but carry no owner record of ours are never read, moved or removed
by any writing command; an interrupted replace leaves nothing beside ``out=``; an old output of
any depth is removed.

Every planted folder is snapshotted (each entry's path, kind, mode and bytes) before and after
each command. Runs are in-process (``main``) with TMPDIR pointed at a planted folder.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.plan import plan
from draftsmith.framework.convert.synth import synthesize
from draftsmith.framework.io.ownership import OWNER_BYTES, OWNER_SUFFIX, owner_path, read_owner
from draftsmith.framework.io.publish import clean_stale_temps
from draftsmith.framework.io.remove_tree import remove_tree
from draftsmith.framework.io.scratch import RUN_SCRATCH, clean_stale_scratch
from support.owned_folders import dead_pid, plant_owned, snapshot
from support.cli import run_cli
from support.reliability_log import record

AREA = "ownership"
SEED = int.from_bytes(os.urandom(4), "little")


def _foreign(parent: Path, name: str, rng: random.Random, record_of: Path | None = None) -> Path:
    """A user's folder ``parent/name`` (a file of random bytes and mode, a subfolder); with
    ``record_of``: also a copy of that folder's owner record beside it (a copy is not ownership)."""
    d = parent / name
    d.mkdir(parents=True)
    (d / "notes.txt").write_bytes(os.urandom(rng.randrange(1, 300)))
    os.chmod(d / "notes.txt", rng.choice([0o600, 0o640, 0o644, 0o400]))
    (d / "sub").mkdir()
    (d / "sub" / "x.bin").write_bytes(os.urandom(16))
    if record_of is not None:
        os.symlink(os.readlink(owner_path(record_of)), owner_path(d))
    return d


def plant_beside(parent: Path, out_name: str, rng: random.Random) -> list[Path]:
    """Every name pattern draftsmith uses beside an output ``out_name``, none of them ours."""
    pid = dead_pid()
    real = plant_owned(parent, f".{out_name}.tmp-")  # a genuine stale temp, to copy its record from
    planted = [
        _foreign(parent, f".{out_name}.tmp-notes", rng),
        _foreign(parent, f".{out_name}.tmp-{pid}-abc", rng),
        _foreign(parent, f".{out_name}.tmp-{pid}-{'0' * 16}", rng, record_of=real),  # a copied record
        _foreign(parent, f".{out_name}.old-20250101", rng),
        _foreign(parent, f".{out_name}.old-{pid}", rng),  # the old fallback's name: once moved *into* out=
    ]
    legacy = _foreign(parent, f".{out_name}.tmp-{dead_pid()}-legacy1", rng)  # an owner file not draftsmith's
    owner_path(legacy).write_text(json.dumps({"pid": pid, "start": None}))
    remove_tree(real)
    os.unlink(owner_path(real))
    return planted + [legacy]


def _entry(q: Path):
    """A record-like entry's kind and content (a link's text, a file's bytes)."""
    return ("link", os.readlink(q)) if os.path.islink(q) else ("file", q.read_bytes())


def plant_scratch(parent: Path, prefix: str, rng: random.Random) -> list[Path]:
    pid = dead_pid()
    return [_foreign(parent, f"{prefix}{pid}-x", rng), _foreign(parent, f"{prefix}notes", rng),
            _foreign(parent, f"{prefix}{pid}-{'1' * 16}", rng)]


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch):
    tmpdir = tmp_path / "TMPDIR"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    return tmpdir


def test_foreign_folders_untouched_by_every_writing_command(tmp_path, tmpdir_env):
    rng = random.Random(SEED)
    w = tmp_path / "w"
    w.mkdir()
    planted: list[Path] = []
    for name in ("s", "o", "x", "i", "dd", "schema.json", "my.yaml"):
        planted += plant_beside(w, name, rng)
    (w / "e").mkdir()
    planted += plant_beside(w / "e", "draftsmith_minimax_dspark", rng)
    planted += plant_scratch(tmpdir_env, RUN_SCRATCH, rng)
    planted += plant_scratch(w, ".draftsmith-export-", rng)
    planted += plant_scratch(tmpdir_env, ".draftsmith-export-", rng)
    before = {p: snapshot(p) for p in planted}
    records = {owner_path(p): _entry(owner_path(p)) for p in planted if os.path.lexists(owner_path(p))}
    commands = [
        ("synth", ["synth", "adapter=minimax_dspark", f"out={w / 's'}", "seed=3"]),
        ("convert", ["convert", "adapter=minimax_dspark", f"source={w / 's'}", f"out={w / 'o'}"]),
        ("convert overwrite=true", ["convert", "adapter=minimax_dspark", f"source={w / 's'}", f"out={w / 'o'}",
                                    "overwrite=true"]),
        ("convert to=", ["convert", "adapter=minimax_dspark", f"source={w / 's'}", f"out={w / 'x'}",
                         "to=minimax_dspark_v0"]),
        ("convert to= overwrite=true", ["convert", "adapter=minimax_dspark", f"source={w / 's'}", f"out={w / 'x'}",
                                        "to=minimax_dspark_v0", "overwrite=true"]),
        ("draft", ["draft", f"checkpoint={w / 's'}", "context=8"]),
        ("emit", ["emit", "adapter=minimax_dspark", f"out={w / 'e'}"]),
        ("emit overwrite=true", ["emit", "adapter=minimax_dspark", f"out={w / 'e'}", "overwrite=true"]),
        ("init", ["init", f"source={w / 's'}", f"out={w / 'my.yaml'}"]),
        ("docs", ["docs", f"out={w / 'dd'}"]),
        ("schema", ["schema", f"out={w / 'schema.json'}"]),
        ("schema overwrite=true", ["schema", f"out={w / 'schema.json'}", "overwrite=true"]),
    ]
    for label, args in commands:
        rc, _, err, _ = run_cli(args)
        assert rc == 0, f"{label}: {err[-1500:]}"
        for p in planted:
            assert os.path.lexists(p), f"{label}: removed a folder draftsmith did not make: {p}"
            assert snapshot(p) == before[p], f"{label}: changed a folder draftsmith did not make: {p}"
        for q, was in records.items():
            assert _entry(q) == was, f"{label}: changed a record beside a folder draftsmith did not make: {q}"
        record(AREA, f"foreign folders named like draftsmith's temps/backups/scratch ({label})",
               "every file's path, bytes and mode unchanged")
    # and nothing of ours is left anywhere: every remaining name is a planted one or an output
    ours = {p.name for p in planted} | {q.name for q in records}
    for folder in (w, w / "e", tmpdir_env):
        left = [n for n in os.listdir(folder) if n not in ours and n not in
                {"s", "o", "x", "e", "dd", "schema.json", "my.yaml", "draftsmith_minimax_dspark"}]
        assert left == [], f"{folder}: left behind {left}"
    assert not (w / "o" / "notes.txt").exists(), "a foreign .o.old-<n> was moved into out="


def test_foreign_old_folder_never_moved_into_out(tmp_path):
    """With ``out=`` absent, a user's ``.o.old-<pid of a dead process>/`` stays where it is."""
    rng = random.Random(SEED)
    out = tmp_path / "o"
    old = _foreign(tmp_path, f".o.old-{dead_pid()}", rng)
    before = snapshot(old)
    clean_stale_temps(out)
    assert not os.path.lexists(out) and snapshot(old) == before
    record(AREA, "foreign .o.old-<dead pid> with out= absent", "left in place, never moved into out=")


def test_stale_owned_folders_are_removed(tmp_path):
    """What draftsmith did make (its record intact, its owner gone) is tidied; a record of a live
    owner, of another host, or one naming another folder is not."""
    out = tmp_path / "o"
    stale = plant_owned(tmp_path, ".o.tmp-")
    live = plant_owned(tmp_path, ".o.tmp-", pid=os.getpid(), start=None)
    other_host = plant_owned(tmp_path, ".o.tmp-", host="another-host.example")
    renamed = plant_owned(tmp_path, ".o.tmp-")
    renamed = renamed.rename(tmp_path / f".o.tmp-{dead_pid()}-{'2' * 16}")
    clean_stale_temps(out)
    assert not stale.exists() and live.is_dir() and other_host.is_dir() and renamed.is_dir()
    s_stale = plant_owned(tmp_path, RUN_SCRATCH)
    assert clean_stale_scratch(RUN_SCRATCH, tmp_path) == [s_stale]
    assert read_owner(live) is not None and read_owner(renamed) is None
    record(AREA, "owner record: stale / live / another host / renamed copy", "only the stale one removed")


def test_owner_record_bounded_and_never_followed(tmp_path):
    """A record file over the size bound, a record link whose text is a path to a valid record
    (links are read, never followed), a record that is a folder, and a folder that is a link are
    not ours; neither the folders nor their records are touched."""
    big = plant_owned(tmp_path, ".o.tmp-")
    rec = json.loads(os.readlink(owner_path(big)))
    os.unlink(owner_path(big))
    owner_path(big).write_text(json.dumps({**rec, "pad": "x" * (OWNER_BYTES + 1)}))
    linked = plant_owned(tmp_path, ".o.tmp-")
    real = tmp_path / "elsewhere.json"
    real.write_text(os.readlink(owner_path(linked)))
    os.unlink(owner_path(linked))
    owner_path(linked).symlink_to(real)
    dir_record = plant_owned(tmp_path, ".o.tmp-")
    os.unlink(owner_path(dir_record))
    owner_path(dir_record).mkdir()
    target = plant_owned(tmp_path, "target-")
    link = tmp_path / f".o.tmp-{dead_pid()}-{'3' * 16}"
    link.symlink_to(target)
    os.symlink(os.readlink(owner_path(target)).replace(target.name, link.name), owner_path(link))
    assert [read_owner(p) for p in (big, linked, dir_record, link)] == [None] * 4
    before = snapshot(tmp_path)
    clean_stale_temps(tmp_path / "o")
    assert snapshot(tmp_path) == before


def test_a_record_alone_is_tidied_and_a_replaced_name_is_not(tmp_path):
    """A stale record whose folder is gone (a run killed between its two removals) is removed;
    one whose folder's name now holds a file or a link is left, with that file or link."""
    gone = plant_owned(tmp_path, ".o.tmp-")
    gone.rmdir()
    now_file = plant_owned(tmp_path, ".o.tmp-")
    now_file.rmdir()
    now_file.write_text("a user's file")
    clean_stale_temps(tmp_path / "o")
    assert not os.path.lexists(owner_path(gone))
    assert now_file.read_text() == "a user's file" and os.path.islink(owner_path(now_file))


def _deep(root: Path, depth: int) -> None:
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("deep")
    finally:
        os.close(fd)


def test_deep_folder_in_a_replaced_output(tmp_path):
    """A 1,500-deep folder inside a replaced output: the old output is removed, nothing is left
    beside out=, and a later run to the same out= succeeds."""
    a = load_adapter("minimax_dspark")
    src = tmp_path / "src"
    synthesize(a, "tiny", src, seed=SEED)
    w = tmp_path / "w"
    out = w / "o"
    args = ["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}", "overwrite=true"]
    assert run_cli(args)[0] == 0
    (out / "mine").mkdir()
    _deep(out / "mine", 1500)
    rc, _, err, _ = run_cli(args)
    assert rc == 0, err[-800:]
    assert sorted(os.listdir(w)) == ["o"], os.listdir(w)
    assert not (out / "mine").exists()
    rc, _, err, _ = run_cli(args)
    assert rc == 0 and sorted(os.listdir(w)) == ["o"], err[-800:]
    record(AREA, "1,500-deep folder inside a replaced output", "old output removed, later runs succeed")


@pytest.mark.parametrize("depth", [5])
def test_remove_tree_any_depth_no_links_followed(tmp_path, depth):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    t = tmp_path / "t"
    t.mkdir()
    _deep(t, depth)
    (t / "link").symlink_to(victim)
    (t / "d" / "link2").symlink_to(victim / "keep.txt")
    remove_tree(t)
    assert not os.path.lexists(t) and (victim / "keep.txt").read_text() == "keep"


# ----------------------------------------------------------------------------- interrupted replace

SERVER = r"""
import json, os, signal, sys
import draftsmith.framework.cli.main as m
import draftsmith.framework.convert.execute
from draftsmith.framework.io import publish as P
from draftsmith.framework.io.ownership import read_owner
from draftsmith.framework.compile.adapter import load_adapter

m.command("convert")  # imported once, before the forks: each run then costs its own work only
load_adapter("minimax_dspark")
cases = json.loads(sys.stdin.read())
out = []
for c in cases:
    pid = os.fork()
    if pid == 0:
        if c["fallback"]:
            P._renameat2 = lambda *a: False
        count = [0]
        def hook():
            count[0] += 1
            if count[0] == c["kill_at"]:
                os.kill(os.getpid(), getattr(signal, c["signal"]))
        P.set_step_hook(hook)
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1); os.dup2(fd, 2)
        try:
            rc = m.main(c["args"])
        except BaseException:
            rc = 99
        os._exit(rc)
    _, status = os.waitpid(pid, 0)
    out.append({"signalled": os.WIFSIGNALED(status), "rc": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "entries": sorted(os.listdir(c["dir"])),
                "owned": sorted(n for n in os.listdir(c["dir"]) if read_owner(os.path.join(c["dir"], n)))})
print(json.dumps(out))
"""


def test_interrupted_replace_leaves_nothing_beside_out(tmp_path):
    """SIGTERM at each step of a replace (atomic exchange, and the move-aside fallback):
    ``out`` holds the old or the new output and nothing of ours is beside it; SIGKILL: only our
    own record-carrying folder, which the next run removes. Planted foreign folders survive."""
    rng = random.Random(SEED)
    a = load_adapter("minimax_dspark")
    src, old_src = tmp_path / "src", tmp_path / "old"
    synthesize(a, "tiny", src, seed=SEED)
    synthesize(a, "tiny", old_src, seed=SEED + 1)
    w = tmp_path / "w"
    w.mkdir()
    out = w / "o"
    planted = plant_beside(w, "o", rng)
    before = {p: snapshot(p) for p in planted}
    foreign = sorted([p.name for p in planted] + [owner_path(p).name for p in planted if os.path.lexists(owner_path(p))])
    k = len(plan(a, src).outputs) + 2  # tensors, config, then publish's first step point
    conv = lambda s: ["convert", "adapter=minimax_dspark", f"source={s}", f"out={out}", "overwrite=true"]  # noqa: E731
    # the step points of a replace: k (before the rename), k + 1 (after the exchange, or after
    # the old output was moved aside), k + 2 (fallback: after the new one was renamed in)
    picks = [(False, "SIGTERM", k + 1), (False, "SIGKILL", k + 1), (True, "SIGTERM", k + 1),
             (True, "SIGKILL", k + 1), (True, "SIGKILL", k + 2)]
    cases = [{"args": conv(old_src), "kill_at": 0, "signal": "SIGKILL", "fallback": False, "dir": str(w)}]
    for fallback, sig, at in picks:
        cases += [{"args": conv(src), "kill_at": at, "signal": sig, "fallback": fallback, "dir": str(w)},
                  {"args": conv(old_src), "kill_at": 0, "signal": sig, "fallback": fallback, "dir": str(w)}]
    p = subprocess.run([sys.executable, "-c", SERVER], input=json.dumps(cases), capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res[0]["rc"] == 0
    for i, (fallback, sig, at) in enumerate(picks):
        killed, rerun = res[1 + 2 * i:3 + 2 * i]
        where = f"{'fallback' if fallback else 'exchange'} {sig} at step {at}"
        ours = [n for n in killed["entries"] if n != "o" and n not in foreign]
        if sig == "SIGTERM":
            assert killed["rc"] == 128 + 15, f"{where}: rc {killed}"
            assert "o" in killed["entries"], f"{where}: out= is gone: {killed['entries']}"
            assert ours == [], f"{where}: left beside out=: {ours}"
        else:
            assert killed["signalled"], where
            # only the fallback between its two renames has no out= (the next run puts it back)
            assert "o" in killed["entries"] or (fallback and at == k + 1), f"{where}: out= is gone"
            folders = [n for n in ours if not n.endswith(OWNER_SUFFIX)]
            assert folders and all(n in killed["owned"] for n in folders), f"{where}: left without an owner record: {ours}"
        assert rerun["rc"] == 0, f"{where}: the next run failed"
        assert [n for n in rerun["entries"] if n not in foreign] == ["o"], f"{where}: {rerun['entries']}"
        record(AREA, f"replace interrupted ({'move-aside fallback' if fallback else 'atomic exchange'}, {sig})",
               "out= old or new, nothing of ours beside it after the run (SIGTERM) or the next run (SIGKILL)")
    for q in planted:
        assert snapshot(q) == before[q], f"changed a folder draftsmith did not make: {q}"


def test_record_is_a_file_where_links_are_refused(tmp_path, monkeypatch):
    """On a file system without symbolic links (``symlink`` fails with EPERM, as on FAT) the record
    is a regular file beside the folder, read and removed the same way; another error is raised."""
    import errno

    from draftsmith.framework.io.ownership import make_owned_dir, remove_owned, stale_owned

    def refused(*a, **k):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", refused)
    d = make_owned_dir(tmp_path, ".o.tmp-", "temp")
    rec = owner_path(d)
    assert d.is_dir() and rec.is_file() and not rec.is_symlink()
    assert read_owner(d)["name"] == d.name and read_owner(d)["pid"] == os.getpid()
    assert stale_owned(tmp_path, ".o.tmp-") == []  # its owner (this process) is alive
    remove_owned(d)
    assert os.listdir(tmp_path) == []

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "symlink", full)
    with pytest.raises(OSError):
        make_owned_dir(tmp_path, ".o.tmp-", "temp")
    assert os.listdir(tmp_path) == []
