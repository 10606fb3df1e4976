"""Up-front checks for ``draftsmith draft``: the lowering can run on this device, and the step
fits in the device's free memory (refused in one line with the estimate, before any work).

The estimate (bytes) counts what :func:`~.draft.run_draft` allocates that grows with the
input: the drafter's weights (its safetensors files), the target's ``embed_tokens`` and
``lm_head`` (``2 * vocab * target_hidden`` in the drafter dtype), the paged KV cache (per
layer ``min(context, window)`` positions, or ``context`` for a full-attention layer, times
``batch * 2 * kv_heads * head_dim``), and one sequence's random context rows
(``rows * num_target_layers * target_hidden`` in float32 plus their cast copy; rows: the
whole context when a layer sees all of it, else the widest window), and the block's step
(``block``: per sequence the attention scores ``heads * B * (rows + B)`` and the logits
``B * vocab``, float32, plus one ``B * (rows + B)`` mask), and DFlash 2's candidate selector
(:func:`selector_bytes`): a huge ``block_size``, head count, vocabulary, ``selector_top_k`` or
``selector_rank`` is refused here, before anything is allocated.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...lowering.base import LOWERINGS, device_class
from ..compile.read_back import read_converted
from ..compile.resolved import ResolvedDrafter
from ..convert.checkpoint import read_config
from ..errors import UserError
from ..io import host_memory

_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def check_lowering(name: str, device: str) -> None:
    """Refuse ``lowering=name`` in one line when it is unknown or cannot run on ``device``
    (naming the lowerings that can)."""
    LOWERINGS.lookup("dense")  # imports the built-ins
    cls = device_class(device)
    where = device if device == cls else f"{device} ({cls})"
    here = sorted(n for n, info in LOWERINGS.items() if cls in info.devices and info.available())
    if name not in LOWERINGS:
        raise UserError(f"lowering={name}: unknown lowering; available on {where}: {', '.join(here)}; "
                        f"all: {', '.join(sorted(LOWERINGS))}")
    if name not in here:
        raise UserError(f"lowering={name}: not available on {where}; available here: {', '.join(here)}")


def estimate_bytes(r: ResolvedDrafter, weight_bytes: int, context: int, batch: int) -> dict[str, int]:
    """The estimate's parts in bytes: weights, target, kv, context_rows (see the module docstring)."""
    d, el = r.dims, _BYTES[r.dims.dtype]
    windows = [l.mask.window for l in r.layers]
    seen = [context if w is None else min(context, w) for w in windows]
    kv = sum(seen) * batch * 2 * d.kv_heads * d.head_dim * el
    rows = max(seen, default=0)
    return {
        "weights": weight_bytes,
        "target": 2 * d.vocab * d.target_hidden * el,
        "kv": kv,
        "context_rows": rows * d.num_target_layers * d.target_hidden * (4 + el),
        "block": block_bytes(r.block_size, rows, d.heads, d.vocab, batch),
        "selector": selector_bytes(r, batch),
    }


def selector_bytes(r: ResolvedDrafter, batch: int) -> int:
    """DFlash 2's candidate selector per step (bytes; 0 without one), for ``K`` drafted positions of
    ``batch`` sequences, vocabulary ``V``, ``k = selector_top_k``, ``r = selector_rank``: the sort
    that picks the candidates (float32 values and int64 ids over ``V``) and the path logits
    (float32 ``V``); the gathered predecessor and successor codebook rows, the gated rows and
    their float32 copies (``4 * k * r`` float32); the pairwise scores and their sum with the
    unary ones (``2 * k * k`` float32)."""
    if r.dflash2 is None:
        return 0
    k, rank = r.dflash2.selector.top_k, r.dflash2.selector.rank
    return batch * r.max_draft_len * (r.dims.vocab * (4 + 8 + 4) + 4 * 4 * k * rank + 2 * 4 * k * k)


def block_bytes(block: int, rows: int, heads: int, vocab: int, batch: int) -> int:
    """The draft step's own tensors (bytes): float32 scores and logits per sequence, one bool mask."""
    return batch * 4 * (heads * block * (rows + block) + block * vocab) + block * (rows + block)


def free_bytes(device: str) -> int | None:
    """Free memory of ``device``: ``MemAvailable`` for the CPU, ``cudaMemGetInfo`` for a GPU;
    None when unknown."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    return host_memory.available_bytes()


def selector_part(r: ResolvedDrafter, n: int) -> str:
    """The selector's share of a refusal ("" without one)."""
    if r.dflash2 is None:
        return ""
    sel = r.dflash2.selector
    return f"candidate selector {_gib(n)} (selector_top_k {sel.top_k}, selector_rank {sel.rank}), "


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_draft_memory(checkpoint: Path, device: str, context: int, batch: int) -> int:
    """The estimate for a draft step on the converted ``checkpoint``; refused in one line
    (estimate and free memory in it) when it exceeds the device's free memory."""
    r = read_converted(read_config(Path(checkpoint)), where=str(Path(checkpoint) / "config.json"))
    weights = sum(p.stat().st_size for p in Path(checkpoint).glob("*.safetensors"))
    parts = estimate_bytes(r, weights, context, batch)
    total = sum(parts.values())
    free = free_bytes(device)
    if free is not None and total > free:
        full = sum(1 for l in r.layers if l.mask.window is None)
        raise UserError(
            f"context={context} batch={batch}: the draft step needs about {_gib(total)} (KV cache {_gib(parts['kv'])}"
            f"{f' for {full} full-attention layer(s)' if full else ''}, context rows {_gib(parts['context_rows'])}, "
            f"block step {_gib(parts['block'])} (block_size {r.block_size}), "
            f"{selector_part(r, parts['selector'])}"
            f"weights {_gib(parts['weights'] + parts['target'])}), more than the {_gib(free)} free on {device}; "
            "lower context= or batch= (or fix the config's sizes)")
    return total
