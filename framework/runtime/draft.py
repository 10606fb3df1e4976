"""``draftsmith draft``: one greedy draft step of a converted checkpoint on the reference host.

``run_draft`` loads ``checkpoint_dir`` (converted: config.json + safetensors) and the
target's ``embed_tokens``/``lm_head`` from ``target_dir``, builds a seeded random target
hidden-state context per sequence, a random anchor per sequence, appends the context to a
paged cache, and runs one draft step. Deterministic for a given seed, whatever the chunking.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import save

from ...transforms.base import dtype_from_name
from ..errors import UserError
from ..io.atomic_file import owned_safetensors, write_file
from . import get_host
from .kv_cache import ring_pages
from .dflash2 import Chain
from .loading import build_drafter
from . import memory
from .memory import block_bytes, selector_bytes

CHUNK = 8192  # rows of random context generated (and seeded) together


@dataclass
class DraftReport:
    """What one draft step produced.

    ``tokens [N, K]`` int64, ``confidence [N, K]`` float32 or ``None``, ``logits [N, K, V]``
    float32 (lm_head + Markov bias; row ``k`` drafted token ``k``). ``K = B`` with
    ``sample_from_anchor``, else ``B - 1`` (slot 0 holds only the anchor). Times in ms:
    ``time_ms`` one draft step (median of ``repeats`` after one warm-up), ``context_ms``
    appending the context of every sequence.
    """

    checkpoint: str
    device: str
    dtype: str
    context: int
    batch: int
    seed: int
    block_size: int
    max_draft_len: int
    sample_from_anchor: bool
    anchors: list[int]
    tokens: torch.Tensor
    confidence: Optional[torch.Tensor]
    logits: torch.Tensor
    layers: list[dict] = field(default_factory=list)  # per layer: causal, window, lowering
    time_ms: float = 0.0
    context_ms: float = 0.0
    dump: Optional[str] = None
    selector: Optional[bool] = None  # DFlash 2: whether the candidate selector drafted; None: no selector
    temperature: float = 0.0  # DFlash 2: the selector's sampled walk; 0: greedy


def context_rows(seed: int, seq: int, start: int, end: int, width: int) -> torch.Tensor:
    """Rows ``start..end-1`` of sequence ``seq``'s random context ``[end-start, width]`` float32.

    Generated in seeded chunks of ``CHUNK`` rows, so any row range is reproducible alone.
    """
    parts = []
    for c in range(start // CHUNK, (end - 1) // CHUNK + 1 if end > start else 0):
        g = torch.Generator().manual_seed((seed * 1_000_003 + seq * 7_919 + c) & 0x7FFF_FFFF_FFFF)
        rows = torch.randn(CHUNK, width, generator=g)
        lo, hi = max(start, c * CHUNK) - c * CHUNK, min(end, (c + 1) * CHUNK) - c * CHUNK
        parts.append(rows[lo:hi])
    return torch.cat(parts) if parts else torch.empty(0, width)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: ``written_by`` in a dump's metadata: what ``dump=`` with ``overwrite=true`` may replace
DUMP_WRITTEN_BY = "draftsmith draft"


def run_draft(checkpoint_dir: str | Path, target_dir: str | Path, device: str = "cpu", context: int = 128,
              seed: int = 0, batch: int = 1, lowering: Optional[str] = None, dump: Optional[str | Path] = None,
              *, dtype: Optional[str | torch.dtype] = None, page_size: int = 16, repeats: int = 3,
              host: str = "torch", overwrite: bool = False, selector: bool = True,
              temperature: float = 0.0) -> DraftReport:
    """One draft step for ``batch`` sequences of ``context`` random context tokens (greedy, but for
    a DFlash 2 selector's sampled walk at ``temperature > 0``: record ``walk_chain``).

    ``dtype``: weights/activations (default: the checkpoint's ``torch_dtype``); ``lowering``:
    one lowering for every layer instead of the per-layer table; ``dump``: a safetensors
    file (metadata: checkpoint, seed, context, ``dtype`` the step ran in, ...) receiving sequence 0's step: ``inputs.target_hidden [C, n*h_target]`` (as fed, in
    the drafter dtype), ``inputs.anchor [1]``, ``target.embed_tokens``, ``target.lm_head``,
    ``outputs.logits [K, V]``, ``outputs.tokens [K]``, ``outputs.confidence [K]`` (with a
    confidence head). Without ``dump``, context rows no layer can see are never generated.
    An existing ``dump`` is replaced only with ``overwrite`` and only when ``draft`` wrote it
    (its metadata's ``written_by``); it is written atomically. A DFlash 2 drafter drafts through
    its candidate selector (``outputs.logits`` are then its path logits, ``-inf`` outside the
    candidates; the dump adds ``outputs.candidates [K, k]`` and ``outputs.realized [K, k]``);
    ``selector=False`` drafts the plain argmax of the same drafter (refused for a drafter
    without a selector). A sampled walk draws its Gumbel noise from a generator seeded with
    ``seed`` on ``device``, anew for every repeat (each repeat drafts the same path); the dump
    adds it as ``outputs.noise [K, k]`` and the temperature to its metadata.
    """
    if context < 1 or batch < 1:
        raise ValueError(f"context and batch must be >= 1, got {context}, {batch}")
    dev = torch.device(device)
    model, _ = build_drafter(get_host(host).model_cls, checkpoint_dir, target_dir, dev,
                             dtype_from_name(dtype) if dtype else None, lowering)
    cfg = model.cfg
    cfg.selector_choice(selector)  # refuses selector=false without a selector
    mode, temp = cfg.walk_chain(selector, temperature)
    chain = Chain(mode, temp)
    width = cfg.dims.num_target_layers * cfg.dims.target_hidden
    check_memory(cfg, dev, context, batch, page_size, model.dtype, dump=bool(dump))
    cache = model.make_cache(batch, page_size=page_size, max_context=context)
    first = 0 if dump else min((cache.needed_from(l, context) for l in range(cfg.dims.num_layers)), default=0)
    g = torch.Generator().manual_seed(seed)
    anchors = torch.randint(0, cfg.dims.vocab, (batch,), generator=g)

    t0 = time.perf_counter()
    dumped_hidden = None
    for n in range(batch):
        hidden = context_rows(seed, n, first, context, width).to(model.dtype)
        if dump and n == 0:
            dumped_hidden = hidden
        cache.advance(n, first)  # rows before `first` are invisible to every layer: skipped
        model.append_context(cache, hidden, seq=n)
    _sync(dev)
    context_ms = (time.perf_counter() - t0) * 1e3

    def noise_source():
        return torch.Generator(dev).manual_seed(seed) if mode == "sampled" else None

    out = model.draft(anchors, cache, selector=selector, chain=chain, generator=noise_source())  # warm-up
    times = []
    for _ in range(max(1, repeats)):
        _sync(dev)
        source = noise_source()
        t0 = time.perf_counter()
        out = model.draft(anchors, cache, selector=selector, chain=chain, generator=source)
        _sync(dev)
        times.append((time.perf_counter() - t0) * 1e3)

    check_finite(model, out, anchors, cache, checkpoint_dir)
    report = DraftReport(
        checkpoint=str(checkpoint_dir), device=str(dev), dtype=str(model.dtype).removeprefix("torch."),
        context=context, batch=batch, seed=seed, block_size=cfg.block_size, max_draft_len=cfg.max_draft_len,
        sample_from_anchor=cfg.sample_from_anchor, anchors=anchors.tolist(), tokens=out.tokens.cpu(),
        confidence=None if out.confidence is None else out.confidence.cpu(), logits=out.logits.cpu(),
        layers=[{"causal": m.causal, "window": m.window, "lowering": name}
                for m, name in zip(cfg.masks, model.layer_lowerings)],
        time_ms=statistics.median(times), context_ms=context_ms,
        selector=None if cfg.dflash2 is None else out.selector is not None, temperature=temp or 0.0,
    )
    if dump:
        embed = model.embed_tokens.weight.detach().cpu().contiguous()
        head = model.lm_head.weight.detach().cpu().contiguous()
        if head.untyped_storage().data_ptr() == embed.untyped_storage().data_ptr():
            head = head.clone()  # a tied target (no lm_head.weight): safetensors refuses shared storage
        tensors = {
            "inputs.target_hidden": dumped_hidden.contiguous(),
            "inputs.anchor": anchors[:1].clone(),
            "target.embed_tokens": embed,
            "target.lm_head": head,
            "outputs.logits": report.logits[0].contiguous(),
            "outputs.tokens": report.tokens[0].contiguous(),
        }
        if report.confidence is not None:
            tensors["outputs.confidence"] = report.confidence[0].contiguous()
        if out.selector is not None:
            tensors["outputs.candidates"] = out.selector.candidates[0].cpu().contiguous()
            tensors["outputs.realized"] = out.selector.realized[0].cpu().contiguous()
            if out.selector.noise is not None:
                tensors["outputs.noise"] = out.selector.noise[0].cpu().contiguous()
        meta = {"checkpoint": report.checkpoint, "seed": str(seed), "context": str(context), "dtype": report.dtype,
                "sample_from_anchor": str(cfg.sample_from_anchor), "lowerings": ",".join(model.layer_lowerings)}
        meta["selector"] = str(out.selector is not None)
        meta["temperature"] = str(temp or 0.0)
        meta["written_by"] = DUMP_WRITTEN_BY
        write_file(dump, save(tensors, metadata=meta), key="dump", command="draft", overwrite=overwrite,
                   owned=owned_safetensors("draft"))
        report.dump = str(dump)
    return report


def estimate_bytes(cfg, context: int, batch: int, page_size: int, dtype: torch.dtype, dump: bool = False) -> int:
    """Bytes ``run_draft`` allocates at least: the paged KV cache (full layers hold ``context``
    tokens, windowed ones a ring of ``W-1`` plus a page) and the random context rows it
    generates (every row with a full layer or ``dump``; else a window's worth), and the block
step's scores and logits (:func:`~.memory.block_bytes`) and DFlash 2's candidate selector
(:func:`~.memory.selector_bytes`)."""
    per_token = 2 * cfg.dims.kv_heads * cfg.dims.head_dim * torch.empty((), dtype=dtype).element_size()
    tokens = 0
    for m in cfg.masks:
        pages = ring_pages(m.window, page_size, context)
        tokens += pages * page_size
    widest = max((context if m.window is None else min(context, m.window + page_size) for m in cfg.masks),
                 default=context)
    rows = context if dump else widest
    width = cfg.dims.num_target_layers * cfg.dims.target_hidden
    block = block_bytes(cfg.block_size, widest, cfg.dims.heads, cfg.dims.vocab, batch) + selector_bytes(cfg, batch)
    return batch * (tokens * per_token + rows * width * 4) + min(rows, CHUNK) * width * 4 + block


def available_bytes(device: torch.device) -> int | None:
    """Free memory on ``device`` (CUDA: free device memory; CPU: available RAM), or None."""
    try:
        return memory.free_bytes(str(device))
    except (ValueError, OSError, RuntimeError, AttributeError):
        return None


def check_memory(cfg, device: torch.device, context: int, batch: int, page_size: int, dtype: torch.dtype,
                 dump: bool = False) -> None:
    """Refuse, before allocating, a step that needs more memory than ``device`` has free."""
    need = estimate_bytes(cfg, context, batch, page_size, dtype, dump)
    have = available_bytes(device)
    if have is not None and need > have:
        raise UserError(f"draftsmith draft: context={context} batch={batch} needs about {need / 2**30:.1f} GiB "
                        f"on {device} ({have / 2**30:.1f} GiB free); lower context or batch")


def _finite(t) -> bool:
    return t is None or bool(torch.isfinite(t).all())


def first_nonfinite(model, anchors: torch.Tensor, cache) -> str:
    """A debug pass of the block through ``model`` naming the first piece whose output is
    not finite: the context path (fc/hidden_norm), the target's embedding, a layer, the final
    norm, the target's lm_head, or the Markov head's bias."""
    with torch.inference_mode():
        probe = torch.zeros(1, cfg_width(model), device=model.device)
        if not _finite(model.project_target_hidden(probe)):
            return "the context projection (fc / hidden_norm weights)"
        ids, pos = model.block_inputs(anchors.to(model.device), cache)
        x = model.embed_block(ids)
        if not _finite(x):
            return "the target's embed_tokens"
        for l, layer in enumerate(model.layers):
            x = layer(x, pos, cache.view(l), model.cfg.masks[l], model.lowerings[l].fn)
            if not _finite(x):
                return f"layer {l} (decoder layer output)"
        z = model.norm(x)
        if not _finite(z):
            return "the final norm"
        if not _finite(model.lm_head(z)):
            return "the target's lm_head"
        return "the Markov head's bias" if model.markov_head is not None else "the logits"


def cfg_width(model) -> int:
    return model.cfg.dims.num_target_layers * model.cfg.dims.target_hidden


def check_finite(model, out, anchors: torch.Tensor, cache, checkpoint_dir) -> None:
    """Non-finite logits (or confidences) stop the run with one line naming where they began (a
    selector's path logits are ``-inf`` off its candidates by design: its realized rows are checked)."""
    logits = out.logits if getattr(out, "selector", None) is None else out.selector.realized
    if _finite(logits) and _finite(out.confidence):
        return
    what = "logits" if not _finite(logits) else "confidence"
    try:
        where = first_nonfinite(model, anchors, cache)
    except Exception:  # a host without the reference structure: say what we know
        where = "unknown (this host has no per-layer debug pass)"
    raise UserError(f"{checkpoint_dir}: the draft step produced non-finite {what} (NaN or Inf); "
                    f"first non-finite output: {where}")


def report_dict(r: DraftReport) -> dict:
    """The report as one JSON-serialisable object (logits summarised by shape)."""
    return {
        "checkpoint": r.checkpoint, "device": r.device, "dtype": r.dtype, "context": r.context,
        "batch": r.batch, "seed": r.seed, "block_size": r.block_size, "max_draft_len": r.max_draft_len,
        "sample_from_anchor": r.sample_from_anchor, "anchors": r.anchors, "tokens": r.tokens.tolist(),
        "confidence": None if r.confidence is None else [[round(float(x), 6) for x in row] for row in r.confidence],
        "logits_shape": list(r.logits.shape), "layers": r.layers, "time_ms": round(r.time_ms, 3),
        "context_ms": round(r.context_ms, 3), "dump": r.dump, "selector": r.selector,
        "temperature": r.temperature,
    }


def report_json(r: DraftReport) -> str:
    """:func:`report_dict` as one line of valid JSON (NaN/Infinity refused, never printed)."""
    return json.dumps(report_dict(r), allow_nan=False)


def format_report(r: DraftReport) -> str:
    """A small human-readable table: per-layer masks and lowerings, then per-sequence drafts."""
    kind = "sample_from_anchor" if r.sample_from_anchor else "slot 0 = anchor"
    lines = [f"draft step  {r.checkpoint}",
             f"device {r.device}  dtype {r.dtype}  context {r.context}  batch {r.batch}  seed {r.seed}  "
             f"B {r.block_size}  K {r.max_draft_len} ({kind})"
             + ("" if r.selector is None else f"  candidate selector {'on' if r.selector else 'off'}")
            + (f"  sampled walk, temperature {r.temperature:g}" if r.temperature else ""),
             "", f"{'layer':>5}  {'mask':<22}  lowering"]
    for i, l in enumerate(r.layers):
        mask = ("full" if l["window"] is None else f"window {l['window']}") + (", causal" if l["causal"] else ", non-causal")
        lines.append(f"{i:>5}  {mask:<22}  {l['lowering']}")
    lines += ["", f"{'seq':>5}  {'anchor':>7}  tokens" + ("  /  confidence" if r.confidence is not None else "")]
    for n in range(r.batch):
        row = f"{n:>5}  {r.anchors[n]:>7}  {r.tokens[n].tolist()}"
        if r.confidence is not None:
            row += "  /  [" + ", ".join(f"{float(c):.3f}" for c in r.confidence[n]) + "]"
        lines.append(row)
    lines += ["", f"draft step {r.time_ms:.3f} ms   context append {r.context_ms:.1f} ms"]
    if r.dump:
        lines.append(f"dump: {r.dump}")
    return "\n".join(lines)
