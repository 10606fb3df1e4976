"""Issue 45 point 3: every lowering an adapter maps to a device class is CUDA-graph safe, on CPU.

- No host read: each lowering runs on meta tensors (shapes, strides and dtypes without values, as
  a CUDA graph's capture sees them: ``.item()``, ``int()``, ``bool()``, ``.tolist()``, ``.cpu()`` and
  any size taken from a value raise). Kernel launches are replaced by recorders there.
- Sizes from shapes: the Triton kernel, run for real under the interpreter, allocates nothing on a
  second call of the same shapes but its outputs, whatever the context lengths.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from draftsmith.lowering import MaskSpec, PagedKV, get_lowering
from draftsmith.lowering import split_merge, trtllm_gen as trtllm_mod, triton_window_block as twb
from support.interp import interpreter_suite
from support.oracles import make_case

_child_results, interp_test = interpreter_suite(__file__)

ADAPTERS = sorted((Path(__file__).resolve().parents[2] / "adapters").glob("*.yaml"))
MASKS = [MaskSpec(causal=False, window=16), MaskSpec(causal=True, window=16), MaskSpec(causal=False),
         MaskSpec(causal=True)]


def mapped_lowerings() -> set[str]:
    """Every lowering any adapter's ``attention.lowering`` table names, for any device class."""
    names = set()
    for path in ADAPTERS:
        table = (yaml.safe_load(path.read_text()).get("attention") or {}).get("lowering") or {}
        for row in table.values():
            names.update(row.values())
    return names


def test_the_adapters_map_these_lowerings():
    """The set this file covers is the set the adapters use (a new one needs its case here)."""
    assert mapped_lowerings() == {"dense", "window_decode_merge", "trtllm_gen", "triton_window_block"}


def case_on(device_case, scratch=False):
    """The case's tensors' shapes, strides and dtypes as meta tensors (no values: none can be
    read); ``scratch``: with scratch pages."""
    c = device_case["cache"]
    n, b = device_case["k_blk"].shape[:2]
    to = lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")  # noqa: E731
    sp = None
    if scratch:
        s = trtllm_mod.scratch_page_count(c.page_size, b)
        sp = torch.arange(n * s, dtype=torch.int32).view(n, s) + c.k_pages.shape[0]
        k = torch.cat([c.k_pages, torch.zeros((n * s,) + tuple(c.k_pages.shape[1:]), dtype=c.k_pages.dtype)])
        v = torch.cat([c.v_pages, torch.zeros_like(k[c.k_pages.shape[0]:])])
    else:
        k, v = c.k_pages, c.v_pages
    cache = PagedKV(to(k), to(v), to(c.block_table), to(c.ctx_lens))
    if sp is not None:
        cache.scratch_pages = to(sp)
    return to(device_case["q"]), cache, to(device_case["k_blk"]), to(device_case["v_blk"])


def fake_trtllm_decode(*, query, kv_cache, block_tables, seq_lens, max_seq_len, window_left, kv_layout, **kw):
    """The kernel's signature, values untouched: what a launch sees is static."""
    assert isinstance(max_seq_len, int) and isinstance(window_left, int) and kv_layout in ("NHD", "HND")
    assert block_tables.is_meta and seq_lens.is_meta and block_tables.dtype == seq_lens.dtype == torch.int32
    return torch.empty_like(query), torch.empty(query.shape[:2], dtype=torch.float32, device=query.device)


class Launch:
    """Stands for a jitted kernel: ``kernel[grid](*args)`` records the grid (ints only)."""

    def __init__(self, log):
        self.log = log

    def __getitem__(self, grid):
        assert all(isinstance(g, int) for g in grid), grid
        return lambda *a, **k: self.log.append(grid)


@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize("name", ["dense", "window_decode_merge", "trtllm_gen"])
def test_torch_lowerings_read_no_host_value(name, mask, monkeypatch):
    """Fails on a lowering that loops over ``int(cache.ctx_lens[n])`` (the pre-issue-45 code)."""
    monkeypatch.setattr(trtllm_mod, "flashinfer_decode", fake_trtllm_decode)
    real = make_case(3, [0, 7, 33, 70], 7, 4, 2, 16, 8, mask.window, torch.bfloat16)
    q, cache, kb, vb = case_on(real, scratch=name == "trtllm_gen")
    with pytest.raises(RuntimeError):  # what the test relies on: a meta tensor's value cannot be read
        int(cache.ctx_lens[0])
    out, lse = get_lowering(name).fn(q, cache, kb, vb, mask, 0.25, return_lse=True)
    assert out.shape == q.shape and out.is_meta and lse.shape == q.shape[:3]


@pytest.mark.parametrize("mask", [MaskSpec(causal=False, window=4096), MaskSpec(causal=True, window=4096),
                                  MaskSpec(causal=False), MaskSpec(causal=True)], ids=str)
@pytest.mark.parametrize("batch", [1, 256])  # several splits, and one
def test_triton_wrapper_reads_no_host_value(mask, batch, monkeypatch):
    """The Triton lowering's launch path on meta tensors: grid and splits from shapes."""
    log = []
    monkeypatch.setattr(twb, "_kernels", lambda: (Launch(log),))
    monkeypatch.setattr(split_merge, "jitted", lambda *f: (Launch(log),))
    monkeypatch.setattr(twb.gluon_window_block, "fits", lambda *a: False)
    monkeypatch.setattr(twb, "tma_fits", lambda *a: False)
    monkeypatch.setattr(twb, "sm_count", lambda device: 132)
    monkeypatch.setattr(split_merge, "sm_count", lambda device: 132)
    monkeypatch.setattr(split_merge, "_SCRATCH", {}, raising=False)
    real = make_case(4, [5] * batch, 7, 4, 2, 16, 64, mask.window, torch.bfloat16)
    monkeypatch.setattr(twb, "check_interpreter", lambda: None)  # meta tensors stand for CUDA ones
    q, cache, kb, vb = case_on(real)
    cache.block_table = torch.empty(batch, 600, dtype=torch.int32, device="meta")  # long reach: splits at batch 1
    out, lse = twb.triton_window_block(q, cache, kb, vb, mask, 0.25, return_lse=True)
    assert out.shape == q.shape and lse.shape == q.shape[:3]
    assert log and (len(log) == 2) == (batch == 1), log  # batch 1: attention + merge


class Counting:
    """A module's ``torch`` whose allocating factories are counted."""

    FACTORIES = ("empty", "empty_like", "zeros", "zeros_like", "full", "ones", "tensor", "arange", "cat")

    def __init__(self, calls):
        self.calls = calls

    def __getattr__(self, name):
        attr = getattr(torch, name)
        if name not in self.FACTORIES:
            return attr

        def counted(*a, **k):
            self.calls.append(name)
            return attr(*a, **k)
        return counted


@pytest.mark.parametrize("mask", [MaskSpec(causal=False, window=16), MaskSpec(causal=True)], ids=str)
@interp_test
def test_interp_triton_second_call_allocates_only_its_outputs(mask, monkeypatch):
    """Under the interpreter, split-KV on (4 'multiprocessors' there): the second call of the same
    shapes, with other context lengths, allocates its ``out`` and ``lse`` and nothing else (the
    pre-issue-45 kernel allocated its split partials every call). One KV head: the allocations
    do not depend on the head count, the interpreter's time does."""
    real = make_case(5, [40, 3], 4, 2, 1, 16, 8, mask.window, torch.float32)
    args = (real["q"], real["cache"], real["k_blk"], real["v_blk"], mask, 0.25)
    cfg = twb.Config(block_m=16, block_n=16, num_splits=3, num_warps=4, num_stages=1)
    twb.triton_window_block(*args, return_lse=True, config=cfg)
    calls = []
    monkeypatch.setattr(twb, "torch", Counting(calls))
    monkeypatch.setattr(split_merge, "torch", Counting(calls))
    real["cache"].ctx_lens.copy_(torch.tensor([17, 29], dtype=real["cache"].ctx_lens.dtype))
    twb.triton_window_block(*args, return_lse=True, config=cfg)
    assert sorted(calls) == ["empty", "empty_like"], calls
