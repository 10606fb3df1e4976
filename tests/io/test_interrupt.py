"""Interrupted conversions: SIGKILL at exact kill points (a step hook installed with
``framework/io/publish.set_step_hook``) and after random delays leaves nothing at the destination
(or the old output, untouched, when replacing one), nothing beside it but its own temp
dir, and the next run succeeds with the same bytes and tidies up.

The runs happen in forked children of one helper process (``python -c SERVER``) that has
imported draftsmith but done no tensor work, so each run costs milliseconds, not an
interpreter start; the random-delay kills come from outside the child (``os.kill``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.plan import plan as conversion_plan
from draftsmith.framework.convert.synth import synthesize
from support.reliability_log import record

SEED = int.from_bytes(os.urandom(4), "little")

SERVER = r"""
import hashlib, json, os, shutil, signal, sys, time
from pathlib import Path
import draftsmith.framework.cli.main, draftsmith.framework.convert.execute  # imported once; no tensor work here
from draftsmith.framework.io.publish import set_step_hook

def snapshot(d):
    d = Path(d)
    if not os.path.lexists(d):
        return None
    if d.is_file():
        return {"": hashlib.sha256(d.read_bytes()).hexdigest()}
    return {str(p.relative_to(d)) + ("/" if p.is_dir() else ""): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
            for p in sorted(d.rglob("*"))}

last = [1.0]

def run(args, kill_at=None, delay=None, delay_frac=None, timed=False):
    if delay_frac is not None:
        delay = delay_frac * last[0]
    pid = os.fork()
    if pid == 0:
        if kill_at is not None:  # the kill_at-th step point SIGKILLs this child
            count = [0]
            def hook():
                count[0] += 1
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
            set_step_hook(hook)
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1); os.dup2(fd, 2)
        try:
            rc = draftsmith.framework.cli.main.main(args)
        except BaseException:
            rc = 99
        os._exit(rc)
    t = time.perf_counter()
    if delay is not None:
        time.sleep(delay)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    if timed:
        last[0] = time.perf_counter() - t
    return {"killed": os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL,
            "rc": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None, "s": time.perf_counter() - t}

steps = json.loads(sys.stdin.read())
# warm-up without tensor work (fork-safe): imports and the spec compile every run repeats
first = dict(a.split("=", 1) for a in next(s for s in steps if s["op"] == "run")["args"][1:])
from draftsmith.framework.compile.adapter import load_adapter
import draftsmith.framework.convert.plan, draftsmith.framework.convert.synth, safetensors.torch, tqdm
load_adapter(first["adapter"], adapter_dir=first.get("adapter_dir"))
out = []
for step in steps:
    op = step.pop("op")
    if op == "run":
        out.append(run(**step))
    elif op == "snapshot":
        out.append({"entries": sorted(os.listdir(step["dir"])) if os.path.isdir(step["dir"]) else None,
                    "out": snapshot(step["out"])})
    elif op == "rm":
        p = Path(step["path"])
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        out.append({})
print(json.dumps(out))
"""


def serve(steps: list[dict]) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", SERVER], input=json.dumps(steps), capture_output=True, text=True,
                       timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(res) == len(steps)
    return res


def convert_args(src: Path, out: Path, *extra: str) -> list[str]:
    return ["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}", *extra]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    base = tmp_path_factory.mktemp("interrupt")
    a = load_adapter("minimax_dspark")
    src, other = base / "src", base / "other"
    synthesize(a, "tiny", src, seed=SEED)
    synthesize(a, "tiny", other, seed=SEED + 1)  # an older, different output to replace
    return base, src, other


def test_kill_points(sources):
    """Exact kill points: every tensor write, the config, each publish step (fresh and replacing)."""
    base, src, other = sources
    rng = random.Random(SEED)
    dest = base / "dest"
    dest.mkdir()
    out = dest / "out"
    ref, old = base / "ref", base / "old"
    # the kill-point count K: the run with kill_at=K dies, kill_at=K+1 finishes
    k_fresh = len(conversion_plan(load_adapter("minimax_dspark"), src).outputs) + 1 + 1  # tensors, config, publish
    fresh = sorted(rng.sample(range(1, k_fresh), 11)) + [k_fresh]
    replace = sorted(set(rng.sample(range(1, k_fresh + 1), 4)) | {k_fresh, k_fresh + 1})
    # reference conversions (the new output, and an older, different one to replace)
    steps: list[dict] = [{"op": "run", "args": convert_args(src, ref)}, {"op": "snapshot", "dir": str(base), "out": str(ref)},
                         {"op": "run", "args": convert_args(other, old)}, {"op": "snapshot", "dir": str(base), "out": str(old)}]
    plan: list[tuple] = []
    for k in fresh:  # no destination yet
        steps += [{"op": "run", "args": convert_args(src, out), "kill_at": k},
                  {"op": "snapshot", "dir": str(dest), "out": str(out)},
                  {"op": "run", "args": convert_args(src, out)},
                  {"op": "snapshot", "dir": str(dest), "out": str(out)},
                  {"op": "rm", "path": str(out)}]
        plan.append(("fresh", k))
    for k in replace:  # an old output at the destination, overwrite=true
        steps += [{"op": "run", "args": convert_args(other, out)},
                  {"op": "run", "args": convert_args(src, out, "overwrite=true"), "kill_at": k},
                  {"op": "snapshot", "dir": str(dest), "out": str(out)},
                  {"op": "run", "args": convert_args(src, out, "overwrite=true")},
                  {"op": "snapshot", "dir": str(dest), "out": str(out)},
                  {"op": "rm", "path": str(out)}]
        plan.append(("replace", k))
    steps += [{"op": "run", "args": convert_args(src, out), "kill_at": k_fresh + 1},
              {"op": "snapshot", "dir": str(dest), "out": str(out)}, {"op": "rm", "path": str(out)}]
    res = serve(steps)
    assert res[0]["rc"] == 0 and res[2]["rc"] == 0
    ref_out, old_out = res[1]["out"], res[3]["out"]
    assert ref_out and old_out and ref_out != old_out
    i = 4
    for mode, k in plan:
        if mode == "fresh":
            killed, after, rerun, final, _ = res[i:i + 5]
            i += 5
            assert killed["killed"], f"seed {SEED}: kill point {k} not reached ({killed})"
            assert after["out"] is None, f"kill point {k}: something at the destination: {after}"
            assert all(e.startswith(".out.tmp-") for e in after["entries"]), after["entries"]
        else:
            made, killed, after, rerun, final, _ = res[i:i + 6]
            i += 6
            assert made["rc"] == 0
            assert killed["killed"], f"seed {SEED}: kill point {k} (replace) not reached ({killed})"
            # the destination holds the old output or the complete new one, never a mix or nothing
            assert after["out"] in (old_out, ref_out), f"kill point {k} (replace): destination is {after['out']}"
            assert all(e == "out" or e.startswith((".out.tmp-", ".out.old-")) for e in after["entries"]), after["entries"]
        assert rerun["rc"] == 0, f"kill point {k} ({mode}): rerun failed"
        assert final["out"] == ref_out, f"kill point {k} ({mode}): rerun differs from the reference"
        assert final["entries"] == ["out"], f"kill point {k} ({mode}): strays after the rerun: {final['entries']}"
        record("interrupt", f"SIGKILL at an exact kill point ({'no destination' if mode == 'fresh' else 'replacing an old output'})",
               "destination empty/old, rerun identical, no strays")
    complete, snap, _ = res[i:i + 3]
    assert complete["rc"] == 0 and snap["out"] == ref_out, f"kill_at={k_fresh + 1} should be past the last point"


def test_refuses_existing_destination(sources):
    """Without overwrite=true an existing destination is refused and left byte-identical."""
    import contextlib
    import hashlib
    import io

    from draftsmith.framework.cli.main import main

    base, src, other = sources
    out = base / "dest2" / "out"
    snap = lambda: {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*"))}  # noqa: E731
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(convert_args(other, out)) == 0
        before = snap()
        assert main(convert_args(src, out)) == 2
    assert "already exists (pass overwrite=true" in err.getvalue()
    assert snap() == before, "an existing destination changed without overwrite=true"
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]
    record("interrupt", "existing destination without overwrite=true", "exit 2, destination untouched")


def test_random_delay_kills(tmp_path):
    """A bigger checkpoint killed from outside after random delays; then one rerun."""
    rng = random.Random(SEED)
    ad = tmp_path / "adapters"
    ad.mkdir()
    (ad / "big_dspark.yaml").write_text(
        "name: big_dspark\nextends: minimax_dspark\nsynth:\n  tiny:\n"
        "    text_config.hidden_size: 384\n    text_config.num_attention_heads: 6\n"
        "    text_config.vocab_size: 2048\n    text_config.dense_intermediate_size: 1536\n"
        "    text_config.dspark_ffn_hidden_size: 1536\n")
    src = tmp_path / "src"
    synthesize(load_adapter("big_dspark", adapter_dir=ad), "tiny", src, seed=SEED)
    dest = tmp_path / "dest"
    dest.mkdir()
    out, ref = dest / "out", tmp_path / "ref"
    args = lambda o: ["convert", "adapter=big_dspark", f"adapter_dir={ad}", f"source={src}", f"out={o}"]  # noqa: E731
    fracs = [round(rng.uniform(0.02, 0.95), 3) for _ in range(5)]
    # overwrite=true throughout: a run that finishes before its kill leaves the complete
    # output, which every later killed run must leave intact (or complete again)
    steps = [{"op": "run", "args": args(ref), "timed": True}, {"op": "snapshot", "dir": str(tmp_path), "out": str(ref)}]
    for f in fracs:
        steps += [{"op": "run", "args": args(out) + ["overwrite=true"], "delay_frac": f},
                  {"op": "snapshot", "dir": str(dest), "out": str(out)}]
    steps += [{"op": "run", "args": args(out) + ["overwrite=true"]}, {"op": "snapshot", "dir": str(dest), "out": str(out)}]
    res = serve(steps)
    assert res[0]["rc"] == 0
    ref_out = res[1]["out"]
    n_killed = 0
    for j, f in enumerate(fracs):
        run, snap = res[2 + 2 * j], res[3 + 2 * j]
        assert snap["out"] in (None, ref_out), f"seed {SEED}: after a kill at {f} of the run the destination holds {snap['out']}"
        assert all(e == "out" or e.startswith((".out.tmp-", ".out.old-")) for e in snap["entries"]), snap["entries"]
        if run["killed"]:
            n_killed += 1
            record("interrupt", "SIGKILL after a random delay (bigger checkpoint)", "destination empty or intact")
        else:
            assert run["rc"] == 0 and snap["out"] == ref_out
    rerun, final = res[-2], res[-1]
    assert rerun["rc"] == 0 and final["out"] == ref_out
    assert final["entries"] == ["out"], f"strays after the rerun: {final['entries']}"
    assert n_killed >= 1, f"no kill landed mid-run (fractions {fracs}, run {res[0]['s']:.2f}s)"


class _Killed(BaseException):
    """Stands for SIGKILL at one step of a removal (no handler of the code under test catches it)."""


def test_creation_and_removal_stopped_at_any_step_leave_only_owned_things(tmp_path, monkeypatch):
    """A run killed while it creates a temp folder, or while it removes one (its own at exit, or a
    stale one it tidies), leaves nothing, or things its owner record names: the record is created
    before the folder and removed after it. Each symlink, mkdir, unlink and rmdir is made to stop
    the run in turn; what is left must then be removable by the next run (and only by its record)."""
    from draftsmith.framework.io.ownership import OWNER_SUFFIX, make_owned_dir, read_record, remove_owned

    files = ["c.json", "build/a.safetensors", "build/sub/b.bin", "build/sub/deeper/d.bin", "z.txt"]

    def build():
        d = make_owned_dir(tmp_path, ".out.tmp-", "temp")
        for f in files:
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_bytes(os.urandom(64))
        return d

    real = {name: getattr(os, name) for name in ("symlink", "mkdir", "unlink", "rmdir")}
    calls = [0, None]  # calls so far, the call that stops the run

    def counted(name):
        def call(*a, **k):
            calls[0] += 1
            if calls[0] == calls[1]:
                raise _Killed()
            return real[name](*a, **k)
        return call

    def left_is_owned(where):
        """Every entry in tmp_path is a record draftsmith wrote for its name, or a folder with one."""
        names = sorted(os.listdir(tmp_path))
        for n in names:
            folder = n[: -len(OWNER_SUFFIX)] if n.endswith(OWNER_SUFFIX) else n
            assert read_record(tmp_path / (folder + OWNER_SUFFIX), folder) is not None, \
                f"{where}: {n} is left without an owner record ({names})"
        return names

    for name in real:
        monkeypatch.setattr(os, name, counted(name))
    d = make_owned_dir(tmp_path, ".out.tmp-", "temp")
    made, calls[0] = calls[0], 0
    assert made == 2  # the record, then the folder
    remove_owned(d)
    removed, calls[0] = calls[0], 0
    assert os.listdir(tmp_path) == [] and removed == 2  # the folder, then the record
    for k in range(1, made + 1):  # creation stopped at each step
        calls[0], calls[1] = 0, k
        with pytest.raises(_Killed):
            make_owned_dir(tmp_path, ".out.tmp-", "temp")
        calls[1] = None
        for n in left_is_owned(f"creation stopped at step {k} of {made}"):
            if n.endswith(OWNER_SUFFIX):
                remove_owned(tmp_path / n[: -len(OWNER_SUFFIX)])
        assert os.listdir(tmp_path) == []
    calls[1] = None
    d, calls[0] = build(), 0
    remove_owned(d)
    total, calls[0] = calls[0], 0
    assert not d.exists() and total == len(files) + 3 + 1 + 1  # files, 3 subfolders, itself, the record
    for k in range(1, total + 1):  # removal stopped at each step
        d, calls[0], calls[1] = build(), 0, k
        with pytest.raises(_Killed):
            remove_owned(d)
        calls[1] = None
        assert left_is_owned(f"removal stopped at step {k} of {total}")
        remove_owned(d)  # the next run's removal
        assert os.listdir(tmp_path) == []
    record("interrupt", "a temp folder's creation or removal stopped at each of its steps",
           "the owner record is created first and removed last")


def _dead_pid() -> int:
    pid = 2**22 - 1  # above the usual pid_max; make sure
    while True:
        try:
            os.kill(pid, 0)
            pid -= 1
        except ProcessLookupError:
            return pid
        except PermissionError:
            pid -= 1


def test_fallback_swap_is_undone(tmp_path, monkeypatch):
    """Without renameat2: a run killed between moving the old output aside (into its owned
    temp folder) and renaming the new one in leaves that folder; the next run puts the old
    output back (or drops it if a new output made it), never losing the only complete copy."""
    from draftsmith.framework.io import publish as C
    from draftsmith.framework.io.ownership import MARKER, write_marker
    from support.owned_folders import plant_owned

    rng = random.Random(SEED)
    out = tmp_path / "out"
    payload = os.urandom(rng.randrange(1, 4096))

    def killed_swap():
        w = plant_owned(tmp_path, ".out.tmp-")
        (w / C.ASIDE).mkdir()
        (w / C.ASIDE / "model.safetensors").write_bytes(payload)
        write_marker(w / C.ASIDE, "convert")  # a draftsmith output, so overwrite=true may replace it
        (w / C.BUILD).mkdir()
        return w

    killed_swap()
    C.clean_stale_temps(out)
    assert (out / "model.safetensors").read_bytes() == payload and sorted(os.listdir(tmp_path)) == ["out"]
    assert (out / MARKER).is_file()
    # with out present, a leftover old copy is dropped
    killed_swap()
    C.clean_stale_temps(out)
    assert sorted(os.listdir(tmp_path)) == ["out"]
    # the fallback publish itself replaces only with overwrite=true
    monkeypatch.setattr(C, "_renameat2", lambda *a: False)
    new = C.atomic_dir(out, True, "convert")
    (new / "model.safetensors").write_bytes(payload[::-1])
    with pytest.raises(C.UserError):
        C.publish(new, out, overwrite=False)
    assert (out / "model.safetensors").read_bytes() == payload
    C.publish(new, out, overwrite=True)
    assert (out / "model.safetensors").read_bytes() == payload[::-1] and sorted(os.listdir(tmp_path)) == ["out"]
    record("interrupt", "half-done swap without renameat2 (old output moved aside)", "restored by the next run")
