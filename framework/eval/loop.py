"""Greedy speculative decoding with a converted drafter and its target (``draftsmith eval``).

One step, context ``C`` (target layer outputs of positions ``0..C-1`` are in the drafter's
cache) and anchor ``a`` at position ``C`` (the target's last token, not yet run through it):

1. the drafter proposes ``d_1..d_K`` for positions ``C+1..C+K``;
2. the target runs ``[a, d_1..d_K]`` at positions ``C..C+K`` (one forward, on its cache);
   ``g_i = argmax`` of its logits at position ``C+i`` is its own token for ``C+i+1``;
3. accept the longest prefix with ``d_i == g_{i-1}`` (``n`` tokens), plus the bonus token
   ``g_n``: ``n + 1`` new tokens (the step's *acceptance length*);
4. the target's cache is cropped to ``C+n+1`` tokens, the drafter gets the layer outputs of
   ``a, d_1..d_n``, and ``g_n`` is the next anchor at ``C+n+1``.

Every emitted token is a target argmax given the tokens before it, so the output is the
target's own greedy generation (tests/eval/test_eval.py checks it against ``generate``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import torch

from ..errors import UserError

from .bounds import check_eval_memory, check_prompt_ids, target_kv_per_token
from .drafter import Drafter
from .prompts import check_prompt_tokens, read_prompts
from .report import EvalReport, PromptResult
from .target import DTYPES, Target


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def speculative(target: Target, drafter: Drafter, prompt: list[int], max_new_tokens: int) -> tuple[list[int], list[int]]:
    """Greedy speculative generation: ``(tokens, accepted)``; ``tokens`` at most
    ``max_new_tokens`` (stopping after an end-of-sequence token), ``accepted[s]`` the drafts
    step ``s`` accepted (its acceptance length is ``accepted[s] + 1``)."""
    k = drafter.max_draft_len
    drafter.reset(len(prompt) + max_new_tokens + k + 1)
    logits, hidden = target.prefill(prompt)
    drafter.append(hidden)
    anchor = int(logits[-1].argmax())
    out, accepted, ctx = [anchor], [], len(prompt)
    while len(out) < max_new_tokens and anchor not in target.eos:
        drafts = drafter.draft(anchor)
        logits, hidden = target.extend([anchor] + drafts)
        own = logits.argmax(-1).tolist()  # own[i]: the target's token for position ctx + i + 1
        n = 0
        while n < k and drafts[n] == own[n]:
            n += 1
        accepted.append(n)
        target.crop(ctx + n + 1)
        drafter.append(hidden[: n + 1])
        ctx += n + 1
        new = drafts[:n] + [own[n]]
        stop = next((i for i, t in enumerate(new) if t in target.eos), None)
        out += new if stop is None else new[: stop + 1]
        anchor = own[n] if stop is None else new[stop]
    return out[:max_new_tokens], accepted


def target_greedy(target: Target, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The target alone, one token per forward on its KV cache (the baseline ``check=true`` compares to)."""
    logits, _ = target.prefill(prompt)
    out = [int(logits[-1].argmax())]
    while len(out) < max_new_tokens and out[-1] not in target.eos:
        logits, _ = target.extend([out[-1]])
        out.append(int(logits[-1].argmax()))
    return out


def run_eval(target: str | Path, checkpoint: str | Path, prompts: str | Path | list[str], max_new_tokens: int = 64,
             device: str = "cpu", dtype: Optional[str] = None, lowering: Optional[str] = None,
             check: bool = False, limit: Optional[int] = None, selector: bool = True) -> EvalReport:
    """Greedy speculative decoding of every prompt; the report of :mod:`.report`.

    ``target``: a Hugging Face causal LM folder or a cached repo id; ``checkpoint``: a
    converted drafter; ``prompts``: a file (:func:`read_prompts`) or a list of strings;
    ``dtype``: ``bfloat16|float16|float32`` for both models (default: each its own);
    ``check``: also run the target alone and compare (``EvalReport.matches``); ``selector``: a DFlash 2
    drafter drafts through its candidate selector (false: the plain argmax, to compare accepted lengths).
    """
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens={max_new_tokens}: expected a positive integer")
    if dtype is not None and dtype not in DTYPES:
        raise UserError(f"dtype={dtype}: expected one of {', '.join(DTYPES)}")
    dev = torch.device(device)
    texts = read_prompts(prompts, limit) if isinstance(prompts, (str, Path)) else list(prompts)[:limit]
    tdtype = DTYPES[dtype] if dtype else None
    drafter = Drafter(checkpoint, dev, tdtype, lowering, selector=selector)
    tgt = Target(target, drafter.target_layer_ids, dev, tdtype)
    width = len(drafter.target_layer_ids) * tgt.hidden_size
    if width != drafter.context_width:
        raise UserError(f"target={target}: its layers give {width} features, the drafter's fc reads {drafter.context_width}")
    drafter.borrow(tgt.shared_modules())

    where = f"prompts={prompts}" if isinstance(prompts, (str, Path)) else "prompt"
    encoded = []
    target_vocab = int(tgt.model.get_input_embeddings().weight.shape[0])  # the ids the target can read
    vocab = min(target_vocab, drafter.resolved.dims.vocab)
    for i, text in enumerate(texts, 1):  # every prompt bounded before any decoding
        ids = tgt.encode(text)
        check_prompt_tokens(f"{where}: prompt {i}", len(ids), max_new_tokens, drafter.max_draft_len, tgt.max_positions)
        check_prompt_ids(f"{where}: prompt {i}", ids, vocab)
        encoded.append(ids)
    longest = max(len(ids) for ids in encoded)  # the sizes speculative() allocates for, before it runs
    el = tgt.dtype.itemsize
    check_eval_memory(drafter.resolved, drafter.dtype.itemsize, str(dev), longest + max_new_tokens + drafter.max_draft_len + 1, longest,
                      target_kv_per_token(tgt.model.config, el), target_vocab, el, max_new_tokens)
    results = []
    for ids in encoded:
        _sync(dev)
        t0 = time.perf_counter()
        out, accepted = speculative(tgt, drafter, ids, max_new_tokens)
        _sync(dev)
        seconds = time.perf_counter() - t0
        r = PromptResult(prompt_tokens=len(ids), tokens=out, accepted=accepted, seconds=seconds,
                         text=tgt.decode(out))
        if check:
            t0 = time.perf_counter()
            ref = target_greedy(tgt, ids, max_new_tokens)
            _sync(dev)
            r.baseline_seconds = time.perf_counter() - t0
            r.match = ref == out
        results.append(r)
    return EvalReport(
        target=str(target), checkpoint=str(checkpoint), device=str(dev),
        target_dtype=str(tgt.dtype).removeprefix("torch."), drafter_dtype=str(drafter.dtype).removeprefix("torch."),
        max_new_tokens=max_new_tokens, block_size=drafter.block_size, max_draft_len=drafter.max_draft_len,
        layers=drafter.layers(), prompts=results, selector=drafter.selector)
