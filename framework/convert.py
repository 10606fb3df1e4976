"""Executing a plan: stream source tensors group by group, write sharded safetensors,
the index and the flattened config into a temp dir, then rename it into place.

Peak memory is bounded by the largest group (the sources one output needs), not the
checkpoint. On any failure nothing exists at the destination.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm import tqdm

from draftsmith.transforms.base import Context, TransformError

from .errors import UserError
from .ownership import check_replaceable, write_marker
from .plan import Group, Plan
from .st_writer import ShardWriter, WriteQueue, shard_layout, shard_names


def run_group(plan: Plan, group: Group, source_tensors: dict[str, torch.Tensor], ctx: Context) -> dict[str, torch.Tensor]:
    """Apply a group's transform applications to its (source-named) tensors."""
    tensors = {plan.renamed[s]: t for s, t in source_tensors.items() if s in plan.renamed}
    for app in group.apps:
        inputs = {role: tensors.pop(name) for role, name in app.binding.inputs.items()}
        try:
            tensors.update(app.transform.forward(app.binding, inputs, ctx))
        except TransformError as e:
            files = sorted({str(plan.sources[s].file) for s in app.sources}) if plan.source else ["<memory>"]
            raise UserError(f"{', '.join(files)}: {e} (source tensors {', '.join(sorted(app.sources))})") from None
    for name in group.outputs:
        t = tensors[name]
        if t.is_floating_point() and not _finite(t):
            srcs = ", ".join(group.sources)
            raise UserError(f"{name}: NaN or Inf after conversion (from {srcs} in {plan.sources[group.sources[0]].file})"
                            if plan.source else f"{name}: NaN or Inf after conversion")
    return {n: tensors[n] for n in group.outputs}


def _finite(t: torch.Tensor) -> bool:
    """No NaN or Inf in ``t`` (a min/max reduction propagates both: one fast pass)."""
    if t.numel() == 0:
        return True
    if t.dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        lo, hi = torch.aminmax(t)
        return bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))
    return bool(torch.isfinite(t.float()).all())


def atomic_dir(out: Path, overwrite: bool, command: str, protect=()):
    """A temp dir beside ``out``, carrying draftsmith's ownership marker (written by
    ``command``); :func:`publish` renames it into place. An existing ``out`` is refused
    unless ``overwrite`` and :func:`~.ownership.check_replaceable` allow replacing it;
    ``protect`` lists the paths the command reads (never replaced, nor their ancestors)."""
    out = Path(out)
    if os.path.lexists(out):
        if not overwrite:
            raise UserError(f"out={out}: already exists (pass overwrite=true to replace it)")
        check_replaceable(out, protect)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"out={out}: cannot create its parent folder ({e.strerror})") from None
    clean_stale_temps(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    write_marker(tmp, command)
    return tmp


def clean_stale_temps(out: Path) -> None:
    """Tidy what an earlier, killed run left beside ``out``: its temp dirs are removed; an
    old output it had moved aside is put back if ``out`` is gone, else removed."""
    for p in out.parent.glob(f".{out.name}.tmp-*"):
        pid = p.name[len(f".{out.name}.tmp-"):].split("-")[0]
        if not (pid.isdigit() and _alive(int(pid))):
            _remove(p)
    for p in out.parent.glob(f".{out.name}.old-*"):
        pid = p.name[len(f".{out.name}.old-"):]
        if pid.isdigit() and _alive(int(pid)):
            continue
        if not os.path.lexists(out):
            os.rename(p, out)  # killed between moving the old output aside and publishing
        else:
            _remove(p)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """Linux ``renameat2``; False where the call or the flag is unsupported (then the caller
    falls back to plain renames). Raises ``FileExistsError`` for NOREPLACE onto an existing path."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        raise FileExistsError(err, os.strerror(err), str(dst))
    return False


_kill_count = 0


def _kill_point() -> None:
    """Test hook (tests/test_interrupt.py): with ``DRAFTSMITH_TEST_KILL_AT=N`` in the
    environment, the N-th kill point this process reaches SIGKILLs it. Kill points: after
    each tensor written, after the config/index, and between the steps of :func:`publish`."""
    at = os.environ.get("DRAFTSMITH_TEST_KILL_AT")
    if at:
        global _kill_count
        _kill_count += 1
        if _kill_count == int(at):
            os.kill(os.getpid(), signal.SIGKILL)


def publish(tmp: Path, out: Path, overwrite: bool, protect=()) -> None:
    """Put the finished ``tmp`` at ``out``. An existing ``out`` is replaced only with
    ``overwrite``, by an atomic exchange where the OS has one (else: moved aside, the new
    output renamed in, the old removed; :func:`clean_stale_temps` undoes a half-done swap)."""
    for f in sorted(tmp.rglob("*")):
        if not f.is_file():
            continue
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    _kill_point()
    if not os.path.lexists(out):
        try:
            if _renameat2(tmp, out, _RENAME_NOREPLACE):
                return
        except FileExistsError:
            pass  # appeared meanwhile: handled below
        else:
            os.rename(tmp, out)
            return
    if not overwrite:
        raise UserError(f"out={out}: already exists (pass overwrite=true to replace it)")
    check_replaceable(out, protect)  # again: it may have appeared or changed since atomic_dir
    if _renameat2(tmp, out, _RENAME_EXCHANGE):  # out is the new output at once; tmp holds the old
        _kill_point()
        _remove(tmp)
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    os.rename(out, old)
    _kill_point()
    os.rename(tmp, out)
    _kill_point()
    _remove(old)


def execute(plan: Plan, out: Path, overwrite: bool = False, progress: bool = True) -> Path:
    """Write the converted checkpoint of a complete plan to ``out`` (atomically)."""
    if not plan.complete:
        raise UserError(*plan.problem_lines())
    out = Path(out)
    protect = [plan.source] if plan.source else []
    tmp = atomic_dir(out, overwrite, "convert", protect)
    threads = torch.get_num_threads()
    # Python threads instead of OpenMP: a chunk pool (one single-threaded torch op each)
    # shares the cores with the writer thread, where OpenMP workers would spin and stall.
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="draftsmith-chunk") as pool:
            _write(plan, tmp, progress, pool)
        publish(tmp, out, overwrite, protect)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        torch.set_num_threads(threads)
    return out


def _write(plan: Plan, tmp: Path, progress: bool, pool=None) -> None:
    ctx = Context(plan.config, pool)
    shards = shard_layout(plan.outputs, plan.max_shard_bytes)
    names = shard_names(len(shards))
    meta = {"format": "pt", "draftsmith_adapter": plan.config["draftsmith"]["adapter"]}
    total = sum(m.nbytes for m in plan.outputs.values())
    writers = [ShardWriter(tmp / n, s, meta) for n, s in zip(names, shards)]
    where = {t: w for w in writers for t in w.metas}

    def source(name: str) -> torch.Tensor:
        """Read one source tensor into memory of its own. The file is mapped only for
        the copy, so mapped pages never pile up in RSS across the checkpoint."""
        st = plan.sources[name]
        try:
            with safe_open(str(st.file), framework="pt") as f:
                return f.get_tensor(name).clone()
        except Exception as e:  # safetensors raises its own error types on bad data
            raise UserError(f"{st.file}: tensor {name}: cannot be read ({e})") from None

    bar = tqdm(total=total, unit="B", unit_scale=True, desc="convert", disable=None if progress else True, leave=False)
    done = 0
    order = {n: i for i, n in enumerate(plan.outputs)}
    queue = WriteQueue(depth=2, after_write=_kill_point)  # file writes overlap conversion
    try:
        for g in sorted(plan.groups, key=lambda g: order[g.outputs[0]]):
            outs = run_group(plan, g, {s: source(s) for s in g.sources}, ctx)
            for name, t in outs.items():
                queue.put(where[name], name, t)
                bar.update(plan.outputs[name].nbytes)
                done += 1
            bar.set_postfix(tensors=f"{done}/{len(plan.outputs)}")
            del outs
    except BaseException:
        queue.close(check=False)  # drain first: the original error is the one to report
        for w in writers:
            w.abort()
        raise
    queue.close()
    bar.close()
    for w in writers:
        w.close()
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": total},
            "weight_map": {t: n for n, s in zip(names, shards) for t in s},
        }
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (tmp / "config.json").write_text(json.dumps(plan.config, indent=2) + "\n")
    _kill_point()
