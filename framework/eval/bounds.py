"""Sizes of an ``eval`` run checked before anything is allocated: every prompt token inside both
vocabularies, and the memory the longest sequence needs within the device's free memory.

The estimate (bytes, :func:`eval_bytes`) counts what grows with the sequence: the drafter's
KV cache (per layer ``context`` positions, or its window, of ``2 * kv_heads * head_dim`` values), the
target's KV cache (per layer ``2 * kv_heads * head_dim`` values per position in its dtype), and
the target's prefill logits (``prompt_tokens * vocab``, in its dtype and as float32).
"""

from __future__ import annotations

from ..compile.resolved import ResolvedDrafter
from ..errors import UserError
from ..io.host_memory import gib
from ..runtime import memory


def check_prompt_ids(where: str, ids: list[int], vocab: int) -> None:
    """Refuse a prompt whose tokenizer gave an id outside ``0..vocab-1`` (``vocab``: the smaller of
    the target's embedding rows and the drafter's vocabulary), naming the first one."""
    bad = next((i for i, t in enumerate(ids) if not 0 <= t < vocab), None)
    if bad is not None:
        raise UserError(f"{where}: token {bad} is id {ids[bad]}, outside the vocabulary (0..{vocab - 1}: the "
                        "target's embedding and the drafter's vocab_size); the tokenizer does not fit the models")


def target_kv_per_token(config, element: int) -> int:
    """Bytes the target's KV cache adds per position: per layer ``2 * kv_heads * head_dim``
    elements (``head_dim`` defaults to ``hidden_size / num_attention_heads``, ``kv_heads`` to the
    head count, as transformers reads them); 0 when the config does not say."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config

    def num(key):
        v = getattr(cfg, key, None)
        return v if type(v) is int and v > 0 else None

    layers, heads, hidden = num("num_hidden_layers"), num("num_attention_heads"), num("hidden_size")
    kv_heads = num("num_key_value_heads") or heads
    head_dim = num("head_dim") or (hidden // heads if hidden and heads else None)
    if not (layers and kv_heads and head_dim):
        return 0
    return layers * 2 * kv_heads * head_dim * element


def eval_bytes(r: ResolvedDrafter, drafter_element: int, context: int, prompt_tokens: int, target_kv_token: int,
               target_vocab: int, target_element: int) -> dict[str, int]:
    """The estimate's parts (bytes) for one sequence of ``context`` positions whose prompt has
    ``prompt_tokens`` tokens (see the module docstring); ``*_element``: bytes per value of each
    model's run dtype."""
    per_position = 2 * r.dims.kv_heads * r.dims.head_dim * drafter_element
    return {
        "drafter_kv": sum(context if l.mask.window is None else min(context, l.mask.window) for l in r.layers)
        * per_position,
        "target_kv": context * target_kv_token,
        "prefill_logits": prompt_tokens * target_vocab * (target_element + 4),
    }


def check_eval_memory(r: ResolvedDrafter, drafter_element: int, device: str, context: int, prompt_tokens: int,
                      target_kv_token: int, target_vocab: int, target_element: int, max_new_tokens: int) -> None:
    """Refuse, in one line naming ``max_new_tokens`` and the parts, a run whose longest sequence
    (``context`` positions) needs more than ``device``'s free memory."""
    parts = eval_bytes(r, drafter_element, context, prompt_tokens, target_kv_token, target_vocab, target_element)
    need, free = sum(parts.values()), memory.free_bytes(device)
    if free is not None and need > free:
        raise UserError(f"max_new_tokens={max_new_tokens}: the longest prompt ({prompt_tokens} tokens) grows to "
                        f"{context} positions, which need about {gib(need)} (drafter KV {gib(parts['drafter_kv'])}, "
                        f"target KV {gib(parts['target_kv'])}, prefill logits {gib(parts['prefill_logits'])}), "
                        f"more than the {gib(free)} free on {device}; lower max_new_tokens= or shorten the prompts")
