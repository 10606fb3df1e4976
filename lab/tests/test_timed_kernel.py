"""lab/timed_kernel.py: the phase-timer build is today's product kernel with
lab/kernel_phases.patch applied (CPU: fails loudly when a kernel edit breaks the patch); with
triton 3.6 it compiles for sm_90 with its timer; on an SM90 GPU its stamps are checked."""

import inspect
from pathlib import Path

import pytest
import torch

import timed_kernel
from draftsmith.lowering import gluon_window_block as gwb

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (ROOT / "lowering" / "gluon_window_block.py").read_text()
TIMER_WORDS = ("TIMED", "TIMER_SLOTS", "timer", "%clock64", "%globaltimer")


def test_the_patch_applies_to_todays_kernel_and_the_product_has_no_timer():
    src = timed_kernel.timed_source()  # raises PatchError, naming the hunk, if a kernel edit broke it
    assert all(w in src for w in TIMER_WORDS)
    assert not [w for w in TIMER_WORDS if w in PRODUCT], "the product kernel carries timer code"
    timed = timed_kernel.load()
    assert timed is not gwb and Path(timed.__file__).read_text() == src
    assert "timer" in inspect.signature(timed.launch).parameters
    assert "timer" not in inspect.signature(gwb.launch).parameters and not hasattr(gwb, "TIMER_SLOTS")
    assert len(timed.TIMER_SLOTS) == len(set(timed.TIMER_SLOTS)) > 0


@pytest.mark.parametrize("port", sorted(timed_kernel.PORTS.glob("*.patch")), ids=lambda p: p.name)
def test_each_timer_port_applies_to_its_variant_chain(port):
    """``lab/variants/timers/X.patch`` (the timer ported to variant X) applies on top of X and the
    variants X applies on top of, and replaces the patch there."""
    variant = ROOT / "lab" / "variants" / port.name
    assert variant.is_file(), f"{port.name}: no variant of that name"
    variants = timed_kernel.chain(variant)
    src = timed_kernel.timed_source(variants=tuple(str(v) for v in variants))
    assert all(w in src for w in TIMER_WORDS)
    text = timed_kernel.kernel_blob(timed_kernel.kernel_of(variant))
    for v in variants:
        text = timed_kernel.apply(text, v.read_text())
    assert src == timed_kernel.apply(text, port.read_text())  # the port, not kernel_phases.patch


def test_a_kernel_edit_under_a_hunk_is_refused_in_one_line():
    patch = timed_kernel.PATCH.read_text()
    hunks = timed_kernel._hunks(patch)
    # a line the last hunk must find, unique in the kernel: edit it as a kernel change would
    line = next(l for l in hunks[-1][1] if l.strip() and PRODUCT.count(l + "\n") == 1)
    edited = PRODUCT.replace(line + "\n", line + "  # edited\n")
    with pytest.raises(timed_kernel.PatchError) as e:
        timed_kernel.apply(edited, patch)
    msg = str(e.value)
    assert "\n" not in msg and "no longer applies" in msg and f"hunk {len(hunks)} " in msg, msg


def test_hunks_apply_where_their_lines_moved():
    head = "# two lines above\n# move every hunk\n"
    assert timed_kernel.apply(head + PRODUCT, timed_kernel.PATCH.read_text()) == head + timed_kernel.timed_source()


def test_the_cli_refuses_a_broken_patch(tmp_path, monkeypatch, capsys):
    broken = tmp_path / "kernel_phases.patch"
    broken.write_text(timed_kernel.PATCH.read_text().replace("\n-", "\n-XX", 1))
    monkeypatch.setattr(timed_kernel, "PATCH", broken)
    assert timed_kernel.main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no longer applies" in err[0], err


@pytest.mark.skipif(not gwb.available(), reason="Gluon's Hopper API (triton 3.6) is not installed here")
def test_the_timed_build_compiles_with_its_timer_and_the_product_has_none():
    from gluon_compile import compile_for_sm90

    timed = timed_kernel.load()
    ptx = compile_for_sm90(timed=True, overlap=False, num_splits=3, page=32, kernel=timed)["ptx"]
    assert "%globaltimer" in ptx and "%clock64" in ptx
    product = compile_for_sm90(overlap=False, num_splits=3, page=32)["ptx"]
    assert "%globaltimer" not in product and "%clock64" not in product
    with pytest.raises(ValueError, match="no phase timer"):
        compile_for_sm90(timed=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_gluon_phase_timer():
    """The phase timer: the same output as the product kernel, bit for bit; each program's ring
    and private tile counts as the split rule gives them (counted here from the keys of each
    split); its stamps in phase order; an unset stamp only where a program has no such tiles
    (the first-private stamp is the first edge tile's, after the ring: the block's keys are used
    before it)."""
    from draftsmith.lowering.base import MaskSpec
    from kernel_tests import kernel_tests

    t = kernel_tests()
    _gpu_case, _require_gluon = t._gpu_case, t._require_gluon

    timed = timed_kernel.load()
    gen = torch.Generator().manual_seed(23)
    ctx, window, splits, hkv, b, tile = [5003, 1000, 299, 64, 0], 4096, 3, 4, 7, 64
    q, cache, kb, vb = _gpu_case(len(ctx), b, 64, hkv, 128, 64, ctx, window, dtype=torch.bfloat16, gen=gen,
                                 poison_unreachable=True)
    _require_gluon((q, cache, kb, vb))
    mask, scale = MaskSpec(causal=False, window=window), 128 ** -0.5
    timer = torch.full((len(ctx) * hkv, splits, len(timed.TIMER_SLOTS)), -7, dtype=torch.int64, device="cuda")
    out = timed.launch(q, cache, kb, vb, mask, scale, num_splits=splits, timer=timer)
    assert torch.equal(out, gwb.launch(q, cache, kb, vb, mask, scale, num_splits=splits))
    with pytest.raises(ValueError, match="timer"):
        timed.launch(q, cache, kb, vb, mask, scale, num_splits=splits, timer=timer[:, :1])
    t = {name: timer[..., i].cpu() for i, name in enumerate(timed.TIMER_SLOTS)}
    for n, c in enumerate(ctx):
        start = max(0, c - (window - 1))
        seen_by_all = c + b - 1 - (window - 1)  # first key every block query's window reaches
        start_al = start // tile * tile
        chunk = -(-(-(-(c - start_al) // splits)) // tile) * tile
        for s in range(splits):
            lo, hi = start_al + s * chunk, min(c, start_al + (s + 1) * chunk)
            firsts = list(range(lo, hi, tile)) if hi > lo else []
            ring = sum(1 for f in firsts if f >= max(start, seen_by_all) and f + tile <= hi)
            edge = len(firsts) - ring  # private tiles after the ring; the block's keys come before it
            private = edge + (s == splits - 1)
            for h in range(hkv):
                p = (n * hkv + h, s)
                assert (t["ring_tiles"][p], t["private_tiles"][p]) == (ring, private), (n, s)
                order = ["clock_entry", "clock_consumer", "clock_q"] + (["clock_first_tile"] if ring else []) + [
                    "clock_interior_done"] + (["clock_first_private"] if edge else []) + [
                    "clock_private_done", "clock_stored"]
                stamps = [t[k][p].item() for k in order]
                assert stamps == sorted(stamps) and stamps[0] > 0, (n, s, dict(zip(order, stamps)))
                assert (t["clock_first_tile"][p] == -7) == (ring == 0)
                assert (t["clock_first_private"][p] == -7) == (edge == 0)
                assert t["clock_entry"][p] <= t["clock_producer"][p]
                if ring:
                    assert t["clock_producer"][p] <= t["clock_first_tma"][p] <= t["clock_last_tma"][p]
                    # the two sides' waits for each other: within the ring's span
                    span = t["clock_interior_done"][p] - t["clock_consumer"][p]
                    assert 0 <= t["consumer_wait"][p] <= span, (n, s)
                    assert 0 <= t["producer_wait"][p] <= t["clock_last_tma"][p] - t["clock_producer"][p], (n, s)
                assert 0 < t["ns_entry"][p] <= t["ns_stored"][p]
                assert 0 <= t["smid"][p] < torch.cuda.get_device_properties(0).multi_processor_count


def test_a_variant_is_timed_under_the_same_timer(tmp_path):
    """``timed_source(variants=...)`` applies a lab variant (a unified diff of the kernel, as
    ``refresh`` writes one) before the timer: the result carries both the variant's lines and the
    timer; a variant that does not apply is refused naming it."""
    anchor = next(l for l in PRODUCT.splitlines() if l.startswith("TILE = "))
    added = "VARIANT_MARK = 1  # a variant's line"
    edited = tmp_path / "edited.py"
    edited.write_text(PRODUCT.replace(anchor + "\n", anchor + "\n" + added + "\n", 1))
    variant = tmp_path / "mark.patch"
    variant.write_text(f"Kernel: {timed_kernel.blob_id(PRODUCT)}\n" + timed_kernel.refresh(edited))
    src = timed_kernel.timed_source(variants=(variant,))
    assert all(w in src for w in TIMER_WORDS) and added in src and added not in timed_kernel.timed_source()
    compile(src, "timed_variant.py", "exec")
    # as kernel_phases' --variant hands them: a list of path strings
    timed = timed_kernel.load([str(variant)])
    assert Path(timed.__file__).read_text() == src and timed is timed_kernel.load((str(variant),))
    assert timed.VARIANT_MARK == 1
    with pytest.raises(timed_kernel.PatchError) as e:
        timed_kernel.apply(PRODUCT.replace(anchor + "\n", anchor + "  # edited\n"), variant.read_text(),
                           name=variant.name)
    assert variant.name in str(e.value) and "\n" not in str(e.value)


def test_switches_are_set_in_the_timed_build():
    """``load(variants, switches)``: the wide build timed with its switches on (its timer port applies
    on top of wide-ring.patch); a switch the source does not hold is refused."""
    wide = ROOT / "lab" / "variants" / "wide-ring.patch"
    timed = timed_kernel.load([str(wide)], ["WIDE_KV", "WIDE_Q_SMEM"])
    assert timed.WIDE_KV is True and timed.WIDE_Q_SMEM is True and "timer" in inspect.signature(timed.launch).parameters
    assert timed_kernel.load([str(wide)]).WIDE_KV is False
    with pytest.raises(ValueError, match="WIDE_NOTHING"):
        timed_kernel.load([str(wide)], ["WIDE_NOTHING"])


def test_refresh_refuses_a_file_with_merge_conflict_markers(tmp_path):
    """A three-way merge of the timed build onto a new kernel can leave conflict markers; refreshing
    from such a file would write them into the patch."""
    edited = tmp_path / "merged.py"
    edited.write_text(PRODUCT.replace("TILE = ", "<<<<<<< ours\n=======\n>>>>>>> theirs\nTILE = ", 1))
    with pytest.raises(timed_kernel.PatchError) as e:
        timed_kernel.refresh(edited)
    assert "conflict" in str(e.value) and "\n" not in str(e.value)
