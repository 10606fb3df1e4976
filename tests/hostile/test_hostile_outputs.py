"""Hostile input, round three (issue 40): only what draftsmith wrote is replaced, every input
is bounded, scratch never outlives a run, one line per problem.

Every attack writes into, or points at, a planted folder (:func:`planted`) whose every file,
link and mode is snapshotted before the module and compared after it: no file outside
draftsmith's own outputs changes during these tests.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.synth import synthesize
from draftsmith.framework.io.ownership import owner_path
from draftsmith.framework.io.scratch import RUN_SCRATCH, clean_stale_scratch
from support.cli import cli_subprocess, run_cli
from support.reliability_log import record

ROOT = Path(__file__).resolve().parents[2]
PAIR = ROOT / "tests" / "fixtures" / "tiny_pair"
AREA = "outputs"


# ----------------------------------------------------------------------------- fixtures


def _snapshot(d: Path) -> dict[str, tuple]:
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = Path(root) / n
            st = os.lstat(p)
            if os.path.islink(p):
                out[str(p.relative_to(d))] = ("link", os.readlink(p))
            elif p.is_file():
                out[str(p.relative_to(d))] = ("file", st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[str(p.relative_to(d))] = ("dir", st.st_mode)
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Files draftsmith did not write: a user's notes, a checkpoint, a foreign package folder.
    Compared byte for byte (and link for link) after every test of the module."""
    d = tmp_path_factory.mktemp("planted")
    (d / "notes.txt").write_text("user notes\n")
    (d / "foreign.json").write_text('{"not": "a schema"}\n')
    (d / "foreign.yaml").write_text("# my own adapter\nname: mine\n")
    (d / "foreign.png").write_bytes(b"\x89PNG\r\n\x1a\nnot draftsmith's")
    (d / "foreign.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    ckpt = d / "ckpt"
    synthesize(load_adapter("minimax_dspark"), "tiny", ckpt, seed=40)
    (d / "docs").mkdir()
    (d / "docs" / "cli.md").write_text("# my own cli notes\n")
    before = _snapshot(d)
    yield d
    assert _snapshot(d) == before, "a file draftsmith did not write changed"


@pytest.fixture(autouse=True)
def _check_planted(planted):
    before = _snapshot(planted)
    yield
    assert _snapshot(planted) == before, "a file draftsmith did not write changed"


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def refused(args: list[str], *needles: str) -> str:
    rc, out, err, _ = run_cli(args)
    assert rc == 2, f"exit {rc}: {out[-400:]} {err[-800:]}"
    assert "Traceback" not in err
    # transformers' own loading bar (eval loads the target) is not draftsmith's message
    lines = [l for l in err.strip().splitlines() if "Loading weights" not in l]
    assert lines and all(l.startswith("error: ") for l in lines), err[-2000:]
    assert not any(c in "".join(lines) for c in "\x1b\r"), "a control character reached the terminal"
    for n in needles:
        assert any(n in l for l in lines), f"{n!r} not in {lines[:5]}"
    return err


def no_temps(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if ".tmp-" in n]


# ----------------------------------------------------------------------------- 2: only ours replaced


@pytest.fixture(scope="module")
def converted(tmp_path_factory, planted):
    d = tmp_path_factory.mktemp("conv") / "out"
    assert run_cli(["convert", "adapter=minimax_dspark", f"source={planted / 'ckpt'}", f"out={d}"])[0] == 0
    return d


def test_draft_dump_never_replaces_a_checkpoint_shard(planted, converted, tmp_path):
    shard = sorted(converted.glob("*.safetensors"))[0]
    before = shard.read_bytes()
    for extra in ([], ["overwrite=true"]):
        refused(["draft", f"checkpoint={converted}", f"target={planted / 'ckpt' / 'target'}", f"dump={shard}", *extra],
                "dump=")
        assert shard.read_bytes() == before
    refused(["draft", f"checkpoint={converted}", f"target={planted / 'ckpt' / 'target'}",
             f"dump={planted / 'foreign.safetensors'}", "overwrite=true"], "not written by draftsmith draft")
    dump = tmp_path / "step.safetensors"
    args = ["draft", f"checkpoint={converted}", f"target={planted / 'ckpt' / 'target'}", f"dump={dump}"]
    assert run_cli(args)[0] == 0 and dump.is_file()
    refused(args, "already exists")
    assert run_cli([*args, "overwrite=true"])[0] == 0  # its own dump: replaced
    assert no_temps(tmp_path) == []
    record(AREA, "draft dump= onto a checkpoint shard / foreign file", "exit 2, file unchanged")


def test_schema_out_replaces_only_its_own_file(planted, tmp_path):
    refused(["schema", f"out={planted / 'foreign.json'}"], "already exists")
    refused(["schema", f"out={planted / 'foreign.json'}", "overwrite=true"], "not written by draftsmith schema")
    link = tmp_path / "link.json"
    link.symlink_to(planted / "notes.txt")
    refused(["schema", f"out={link}", "overwrite=true"], "symbolic link")
    out = tmp_path / "schema.json"
    assert run_cli(["schema", f"out={out}"])[0] == 0
    refused(["schema", f"out={out}"], "already exists")
    assert run_cli(["schema", f"out={out}", "overwrite=true"])[0] == 0
    assert json.loads(out.read_text())["title"] == "draftsmith adapter spec"
    record(AREA, "schema out= onto a foreign file / symlink", "exit 2, file unchanged")


@pytest.fixture
def full_disk(monkeypatch):
    """Every write of the atomic file writer fails with ENOSPC after 100 bytes (a full disk)."""
    real = os.write
    state = {"n": 0}

    def write(fd, data):
        if state["n"] >= 100:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real(fd, bytes(data[:50]))
        state["n"] += n
        return n

    monkeypatch.setattr(os, "write", write)
    return state


@pytest.fixture
def tiny_fs(tmp_path):
    """A real 64 KiB tmpfs (needs mount rights; skipped without them), filled to ~12 KiB free."""
    d = tmp_path / "tinyfs"
    d.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)], capture_output=True)
    if p.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (d / "filler").write_bytes(b"x" * (52 << 10))
        yield d
    finally:
        subprocess.run(["umount", str(d)], capture_output=True)


def test_schema_and_init_on_a_real_full_tmpfs(planted, tiny_fs):
    out = tiny_fs / "schema.json"
    refused(["schema", f"out={out}"], "out=")
    spec = tiny_fs / "my_drafter.yaml"
    (tiny_fs / "filler").write_bytes(b"x" * (60 << 10))
    refused(["init", f"source={planted / 'ckpt'}", f"out={spec}"], "out=")
    assert sorted(os.listdir(tiny_fs)) == ["filler"], os.listdir(tiny_fs)
    record(AREA, "schema out= / init out= on a full tmpfs", "exit 2, nothing half-written, no temp")


def test_schema_on_a_full_disk_leaves_nothing_half_written(tmp_path, full_disk):
    out = tmp_path / "schema.json"
    refused(["schema", f"out={out}"], "No space left")
    assert not out.exists() and no_temps(tmp_path) == []
    full_disk["n"] = -(10**9)  # room again
    assert run_cli(["schema", f"out={out}"])[0] == 0
    old = out.read_bytes()
    full_disk["n"] = 0  # full again: replacing its own file keeps the old one whole
    refused(["schema", f"out={out}", "overwrite=true"], "No space left")
    assert out.read_bytes() == old and no_temps(tmp_path) == []
    record(AREA, "schema out= on a full disk (ENOSPC)", "exit 2, nothing half-written, no temp")


def test_init_never_writes_through_a_planted_temp_name(planted, tmp_path):
    out = tmp_path / "my_drafter.yaml"
    for pid in range(os.getpid() - 2, os.getpid() + 3):  # the old predictable name: .NAME.tmp-<pid>
        (tmp_path / f".{out.name}.tmp-{pid}").symlink_to(planted / "notes.txt")
    rc, _, err, _ = run_cli(["init", f"source={planted / 'ckpt'}", f"out={out}"])
    assert rc == 0, err
    assert out.is_file() and not out.is_symlink() and "draftsmith init" in out.read_text()
    assert (planted / "notes.txt").read_text() == "user notes\n"
    refused(["init", f"source={planted / 'ckpt'}", f"out={planted / 'foreign.yaml'}", "overwrite=true"],
            "not written by draftsmith init")
    record(AREA, "init with a symlink planted at the temp name", "link never followed")


def test_init_on_a_full_disk_leaves_no_partial_temp(planted, tmp_path, full_disk):
    out = tmp_path / "my_drafter.yaml"
    refused(["init", f"source={planted / 'ckpt'}", f"out={out}"], "No space left")
    assert not out.exists() and os.listdir(tmp_path) == []
    record(AREA, "init on a full disk (ENOSPC)", "exit 2, no partial temp")


def test_emit_never_replaces_a_folder_convert_wrote(converted, tmp_path):
    import shutil

    pkg_parent = tmp_path / "plugins"
    pkg_parent.mkdir()
    target = pkg_parent / "draftsmith_minimax_dspark"
    shutil.copytree(converted, target)
    before = _snapshot(target)
    for extra in ([], ["overwrite=true"]):
        rc, out, err, _ = run_cli(["emit", "adapter=minimax_dspark", f"out={pkg_parent}", *extra])
        if "overwrite" in err and "does not apply" in err:
            continue  # the key itself is refused (today's table): nothing replaced either
        assert rc == 2, f"exit {rc}: {err[-500:]}"
        assert "written by `draftsmith convert`" in err
    assert _snapshot(target) == before
    record(AREA, "emit onto a folder convert wrote", "exit 2, folder unchanged")


def test_emit_takes_overwrite_key():
    rc, _, err, _ = run_cli(["emit", "adapter=minimax_dspark", "out=plugins", "overwrite=true"])
    assert rc == 0, err
    record(AREA, "emit overwrite=true (recommended by its own refusal)", "accepted")


def test_docs_out_replaces_only_generated_files(planted, tmp_path):
    refused(["docs", f"out={planted / 'docs'}"], "not written by draftsmith docs")
    out = tmp_path / "docs"
    assert run_cli(["docs", f"out={out}"])[0] == 0
    assert run_cli(["docs", f"out={out}", "check=true"])[0] == 0
    record(AREA, "docs out= onto a folder holding a foreign cli.md", "exit 2, nothing written")


def test_eval_plot_replaces_only_its_own_plot(planted):
    pytest.importorskip("matplotlib")
    refused(["eval", f"checkpoint={PAIR / 'dspark'}", f"target={PAIR / 'target'}", f"prompts={PAIR / 'prompts.jsonl'}",
             f"plot={planted / 'foreign.png'}", "overwrite=true"], "not written by draftsmith eval")
    record(AREA, "eval plot= onto a foreign PNG", "exit 2 before the run, file unchanged")


def test_ownership_names_the_command_kind(tmp_path):
    from draftsmith.framework.io.ownership import check_replaceable, write_marker
    from draftsmith.framework.errors import UserError

    d = tmp_path / "pkg"
    d.mkdir()
    write_marker(d, "emit")
    check_replaceable(d, command="emit")
    with pytest.raises(UserError, match="written by `draftsmith emit`"):
        check_replaceable(d, command="convert")
    write_marker(d, "convert")
    check_replaceable(d, command="export")  # convert to= and convert write one kind: checkpoints
    with pytest.raises(UserError):
        check_replaceable(d, command="synth")


# ----------------------------------------------------------------------------- 3: bounded


def _hub(tmp_path: Path) -> Path:
    hub = tmp_path / "hub"
    repo = hub / "models--org--name"
    (repo / "refs").mkdir(parents=True)
    (repo / "snapshots").mkdir()
    return hub


@pytest.mark.parametrize("kind", ["fifo", "zero", "absolute", "dotdot_dir"])
def test_revision_stays_inside_the_cache(kind, tmp_path):
    hub = _hub(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    if kind == "fifo":
        os.mkfifo(outside / "fifo")
        rev = "../../../outside/fifo"
    elif kind == "zero":
        rev = "../../../zero"
        (tmp_path / "zero").symlink_to("/dev/zero")
    elif kind == "absolute":
        rev = "refs//etc/passwd"
    else:
        rev = "../snapshots/../../../outside"
    try:
        p = cli_subprocess(["inspect", f"source=org/name@{rev}"], timeout=20, env={"HF_HUB_CACHE": str(hub)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"source=org/name@{rev} blocked (opened a FIFO or read /dev/zero)")
    assert p.returncode == 2, p.stderr[-800:]
    assert "Traceback" not in p.stderr and p.stderr.startswith("error: source=org/name@")
    assert len(p.stderr.strip().splitlines()) == 1
    record(AREA, f"revision reaching outside the cache ({kind})", "exit 2, nothing opened")


def test_revision_in_cache_still_resolves(planted, tmp_path):
    import shutil

    hub = _hub(tmp_path)
    commit = "a" * 40
    shutil.copytree(planted / "ckpt", hub / "models--org--name" / "snapshots" / commit)
    (hub / "models--org--name" / "refs" / "main").write_text(commit)
    p = cli_subprocess(["inspect", "adapter=minimax_dspark", "source=org/name@main"], env={"HF_HUB_CACHE": str(hub)})
    assert p.returncode == 0, p.stderr[-800:]


def _eval(prompts: Path, *extra: str) -> list[str]:
    return ["eval", f"checkpoint={PAIR / 'dspark'}", f"target={PAIR / 'target'}", f"prompts={prompts}",
            "threads=1", "max_new_tokens=4", *extra]


@pytest.mark.parametrize("case", ["bytes", "tokens", "digits", "surrogate", "count"])
def test_eval_prompts_bounded(case, tmp_path):
    p = tmp_path / "prompts.jsonl"
    if case == "bytes":
        p.write_text(json.dumps({"prompt": "a" * (2 << 20)}) + "\n")
        needle = "bytes"
    elif case == "tokens":  # the tiny target's max_position_embeddings is 4096 (byte-level tokens)
        p.write_text(json.dumps({"prompt": "ab " * 2000}) + "\n")
        needle = "max_position_embeddings"
    elif case == "digits":
        p.write_text('{"prompt": "x", "n": ' + "9" * 5000 + "}\n")
        needle = "prompts.jsonl:1"
    elif case == "surrogate":
        p.write_text('{"prompt": "x\\ud800y"}\n')
        needle = "surrogate"
    else:
        p.write_text("".join(f"p{i}\n" for i in range(100_001)))
        p = p.rename(tmp_path / "prompts.txt")
        needle = "prompts"
    t = time.perf_counter()
    refused(_eval(p), needle)
    assert time.perf_counter() - t < 60
    record(AREA, f"eval prompt unbounded ({case})", "exit 2 before decoding")


def test_eval_sigterm_is_honoured(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"prompt number {i} is a longer line of text\n" for i in range(2000)))
    proc = subprocess.Popen([sys.executable, "-m", "draftsmith", *_eval(prompts)[:-1], "max_new_tokens=64"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("eval ignored SIGTERM")
    assert proc.returncode in (128 + signal.SIGTERM, 2, 0), err[-500:]
    assert "Traceback" not in err
    record(AREA, "eval SIGTERM mid-run", "exits within 30 s")


def _source_with(planted: Path, tmp_path: Path, key: str, value) -> Path:
    import shutil

    d = tmp_path / "src"
    shutil.copytree(planted / "ckpt", d)
    cfg = json.loads((d / "config.json").read_text())

    def walk(c):
        for k, v in c.items():
            if k == key:
                c[k] = value
            elif isinstance(v, dict):
                walk(v)
    walk(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("key,value", [("dspark_block_size", 10**6), ("num_attention_heads", 10**7),
                                       ("vocab_size", 10**9)])
def test_config_dims_bounded_before_allocation(key, value, planted, tmp_path):
    src = _source_with(planted, tmp_path, key, value)
    p = cli_subprocess(["draft", f"checkpoint={src}"], timeout=120)
    assert p.returncode == 2, p.stderr[-800:]
    assert "Traceback" not in p.stderr and "allocate" not in p.stderr
    record(AREA, f"config {key}={value}", "exit 2 before allocating")


def test_threads_bounded_by_the_machine():
    p = cli_subprocess(["draft", "threads=100000"], timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr[-500:])
    assert p.stderr.strip().splitlines() == [l for l in p.stderr.strip().splitlines() if "threads=100000" in l]
    record(AREA, "threads=100000", "exit 2 naming threads")


@pytest.mark.parametrize("arg", ["context=" + str(10**26), "context=" + str(2**31), "batch=" + "9" * 5000,
                                 "page_size=" + str(2**40)])
def test_numeric_keys_name_themselves(arg):
    refused(["draft", arg], arg.split("=")[0] + "=")
    record(AREA, f"out-of-range {arg.split('=')[0]}", "exit 2 naming the key")


# ----------------------------------------------------------------------------- 4: scratch


def _kill_when(args: list[str], folder: Path, prefix: str, env: dict, timeout: float = 120,
               out: Optional[Path] = None, tries: int = 5) -> None:
    """Run ``draftsmith ARGS`` and SIGKILL it once a ``prefix`` scratch folder holding
    ``converted`` appears in ``folder``. A run that finishes first (a fast machine) is undone
    (``out``, which the test's own tmp folder holds, removed) and tried again; never caught:
    the test is skipped, saying so."""
    for _ in range(tries):
        proc = subprocess.Popen([sys.executable, "-m", "draftsmith", *args], env={**os.environ, **env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t, caught = time.time(), False
        try:
            while time.time() - t < timeout and proc.poll() is None:
                if any(n.startswith(prefix) and (folder / n / "converted").exists() for n in os.listdir(folder)):
                    caught = True
                    break
                time.sleep(0.002)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        if caught:
            return
        if out is not None and out.exists():
            shutil.rmtree(out)
    pytest.skip(f"the run finished {tries} times before its scratch folder could be seen")


def test_killed_draft_scratch_removed_next_run(planted, tmp_path):
    tmp = tmp_path / "TMPDIR"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    _kill_when(["draft", f"checkpoint={planted / 'ckpt'}"], tmp, "draftsmith", env)
    p = cli_subprocess(["draft", f"checkpoint={planted / 'ckpt'}"], env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-800:]
    assert [n for n in os.listdir(tmp) if n.startswith("draftsmith")] == []
    record(AREA, "draft SIGKILLed during its scratch conversion", "next run removes the scratch")


def test_killed_export_scratch_removed_next_run(tmp_path):
    src = tmp_path.parent / f"{tmp_path.name}-zlab"
    synthesize(load_adapter("zlab_dflash"), "tiny", src, seed=40)
    out = tmp_path / "exp"
    args = ["convert", "adapter=zlab_dflash", f"source={src}", f"out={out}", "to=speculators", "verifier=org/v"]
    _kill_when(args, tmp_path, ".draftsmith-export-", {}, out=out)
    p = cli_subprocess(args, timeout=300)
    assert p.returncode == 0, p.stderr[-800:]
    assert sorted(os.listdir(tmp_path)) == ["exp"], os.listdir(tmp_path)
    record(AREA, "convert to= SIGKILLed during its export scratch", "next run removes the scratch")


def test_stale_scratch_of_others_kept(tmp_path):
    """A live run's scratch, a folder whose record beside it is not draftsmith's, and an unrelated
    folder are kept."""
    from support.owned_folders import dead_pid, plant_owned

    live = plant_owned(tmp_path, RUN_SCRATCH, pid=os.getpid(), start=None)
    foreign = tmp_path / f"{RUN_SCRATCH}{dead_pid()}-{'4' * 16}"
    foreign.mkdir()
    owner_path(foreign).write_text(json.dumps({"pid": dead_pid(), "start": None}))
    unrelated = tmp_path / "draftsmith-notes"
    unrelated.mkdir()
    assert clean_stale_scratch(RUN_SCRATCH, tmp_path) == []
    assert live.is_dir() and foreign.is_dir() and owner_path(foreign).is_file() and unrelated.is_dir()


# ----------------------------------------------------------------------------- 5: one line per problem


def _rename_tensor(src: Path, dst: Path, new: str) -> None:
    import shutil

    shutil.copytree(src, dst)
    f = sorted(dst.glob("*.safetensors"))[0]
    b = f.read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    h = json.loads(b[8:8 + n])
    old = next(k for k in h if k != "__metadata__")
    h[new] = h.pop(old)
    hb = json.dumps(h).encode()  # a lone surrogate is written as its JSON escape
    hb += b" " * ((8 - len(hb) % 8) % 8)
    f.write_bytes(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
    idx = dst / "model.safetensors.index.json"
    if idx.exists():
        j = json.loads(idx.read_text())
        j["weight_map"][new] = j["weight_map"].pop(old)
        idx.write_text(json.dumps(j))


@pytest.mark.parametrize("name", ["bad\ud800name", "bad\nname", "bad\x1b[31mred", "bad\u202ename"])
@pytest.mark.parametrize("command", ["inspect", "convert", "init"])
def test_hostile_tensor_names_one_line_escaped(name, command, planted, tmp_path):
    src = tmp_path / "src"
    _rename_tensor(planted / "ckpt", src, name)
    args = {"inspect": ["inspect", "adapter=minimax_dspark", f"source={src}"],
            "convert": ["convert", "adapter=minimax_dspark", f"source={src}", f"out={tmp_path / 'o'}"],
            "init": ["init", f"source={src}", f"out={tmp_path / 'spec.yaml'}"]}[command]
    rc, out, err, _ = run_cli(args)
    assert rc in (1, 2), (rc, err[-500:])
    assert "Traceback" not in err
    text = out + err
    assert not any(c in text for c in ("\x1b", "\ud800", "\u202e")), "raw control/surrogate reached the terminal"
    lines = [l for l in text.splitlines() if "bad" in l]
    assert lines, text[-800:]
    assert all("bad\\" in l for l in lines), lines
    assert not (tmp_path / "o").exists() and not (tmp_path / "spec.yaml").exists()
    record(AREA, f"tensor name with {name[3]!a} ({command})", "one escaped line, no traceback")


# ----------------------------------------------------------------------------- 6: docs generator


def _adapter_dir_with(tmp_path: Path, text: str) -> Path:
    """An adapter folder holding one extra adapter whose ``docs.model`` is ``text``."""
    import yaml

    d = tmp_path / "adapters"
    d.mkdir()
    spec = yaml.safe_load((ROOT / "adapters" / "zlab_dflash.yaml").read_text(encoding="utf-8"))
    spec["name"] = "hostile_docs"
    spec.setdefault("docs", {})["model"] = text
    (d / "hostile_docs.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return d


def test_docs_marker_in_spec_refused_and_readme_stable(tmp_path, monkeypatch):
    from draftsmith.framework import docs
    from draftsmith.framework.docs.markdown import README_BEGIN, README_END

    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    readme = root / "README.md"
    readme.write_text(f"# r\n\n{README_BEGIN}\nold\n{README_END}\n\ntail\n")
    monkeypatch.setattr(docs, "repo_root", lambda: root)
    monkeypatch.setattr(docs, "default_docs_dir", lambda: root / "docs")
    adapters = _adapter_dir_with(tmp_path, f"evil {README_END} x")
    sizes = []
    for _ in range(2):
        rc, _, err, _ = run_cli(["docs", f"adapter_dir={adapters}"])
        sizes.append(readme.stat().st_size)
    assert rc == 2 and README_END in err.replace("\\", ""), err[-500:]
    assert sizes[0] == sizes[1], "README grew"
    record(AREA, "docs END marker inside a spec string", "exit 2, README stable")


def test_docs_carriage_return_round_trips(tmp_path):
    adapters = _adapter_dir_with(tmp_path, "a\rb")
    out = tmp_path / "docs"
    rc, _, err, _ = run_cli(["docs", f"out={out}", f"adapter_dir={adapters}"])
    assert rc == 0, err
    rc, o, err, _ = run_cli(["docs", f"out={out}", f"adapter_dir={adapters}", "check=true"])
    assert rc == 0, o[-800:]
    record(AREA, "docs string holding \\r", "check=true fresh right after docs")


def test_emit_adapter_path_yaml(tmp_path):
    y = (ROOT / "adapters" / "minimax_dspark.yaml").read_text(encoding="utf-8").replace(
        "name: minimax_dspark", "name: my_drafter")
    (tmp_path / "elsewhere").mkdir()
    spec = tmp_path / "elsewhere" / "my_drafter.yaml"
    spec.write_text(y, encoding="utf-8")
    rc, out, err, _ = run_cli(["emit", f"adapter={spec}", f"out={tmp_path / 'pkg'}"])
    assert rc == 0, err[-800:]
    assert (tmp_path / "pkg").is_dir()
    record(AREA, "emit adapter=path.yaml", "works")
