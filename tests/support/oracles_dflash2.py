"""Float64 oracle of DFlash 2's additions to the DFlash step (docs/dflash2-reference.md).

Written from the reference note with loops that mirror its formulas, not from any engine's
code: section 2 (the grouped block convolution and where it wraps a sublayer), section 3 (the
unary transform, named explicitly), section 4 (pairwise edge scores) and section 5 (the greedy
path walk and the full-vocabulary rows it leaves). Every function returns float64 (ids int64).

Shapes: block rows are request-major, ``N = requests * block``; slot ``t = row % block``.
"""

from __future__ import annotations

import math

import torch

F64 = torch.float64


def conv_coefficients(x, projection):
    """``d = W x`` per row (section 2, "Coefficients"): ``x`` ``[N, h]``, ``projection``
    ``[2*T*G, h]`` -> ``[N, 2*T*G]``; :func:`split_coefficients` reads it as ``[N, 2, T, G]``."""
    return x.to(F64) @ projection.to(F64).T


def split_coefficients(d, taps: int, groups: int):
    """``[N, 2*T*G]`` -> ``[N, 2, T, G]``, element (side, tap, group) = ``side*T*G + tap*G + group``."""
    n = d.shape[0]
    out = torch.empty(n, 2, taps, groups, dtype=F64)
    for side in range(2):
        for tap in range(taps):
            for grp in range(groups):
                out[:, side, tap, grp] = d[:, side * taps * groups + tap * groups + grp]
    return out


def grouped_block_conv(y, delta, base, block: int, group_size: int):
    """One side of the convolution (section 2, "One side").

    ``y`` ``[N, h]``; ``delta`` ``[N, T, G]`` (this side's coefficients, of the *output* row);
    ``base`` ``[T, h]``. Row ``t`` of a block sums taps ``i <= min(T-1, t)`` of
    ``(base[i, c] + delta[t, i, c // group_size]) * y[t - i, c]``: causal, block-local.
    """
    y, delta, base = y.to(F64), delta.to(F64), base.to(F64)
    n, h = y.shape
    taps = base.shape[0]
    group_of = torch.arange(h) // group_size
    out = torch.zeros(n, h, dtype=F64)
    for row in range(n):
        slot = row % block
        for tap in range(min(taps, slot + 1)):
            coeff = base[tap] + delta[row, tap, group_of]
            out[row] += coeff * y[row - tap]
    return out


def conv_wrap(sublayer, x, projection, base_kernel, block: int, group_size: int):
    """``finish(sublayer(prepare(x)))`` (section 2, "Placement").

    ``base_kernel`` ``[2, T, h]``: side 0 convolves the sublayer's input, side 1 its output,
    both with coefficients projected from the *input* ``x``. ``sublayer`` maps ``[N, h]`` rows
    to ``[N, h]`` rows (float64). Returns what the residual is added to.
    """
    taps, h = base_kernel.shape[1], base_kernel.shape[2]
    d = split_coefficients(conv_coefficients(x, projection), taps, h // group_size)
    inner = grouped_block_conv(x, d[:, 0], base_kernel[0], block, group_size)
    return grouped_block_conv(sublayer(inner), d[:, 1], base_kernel[1], block, group_size)


def dflash2_layer(x, attn, mlp, norm_in, norm_post, conv_attn, conv_mlp, block, group_size):
    """One draft layer's block rows with both wraps (section 2, "Placement").

    ``attn``/``mlp``/``norm_*`` map rows to rows; ``conv_attn``/``conv_mlp`` are
    ``(projection, base_kernel)`` pairs. Residuals are added after the output-side conv.
    """
    x = x.to(F64)
    x = x + conv_wrap(attn, norm_in(x), *conv_attn, block, group_size)
    return x + conv_wrap(mlp, norm_post(x), *conv_mlp, block, group_size)


def unary_transform(logits, multiplier: float = 1.0, cap: float | None = None,
                    order: str = "scale_then_cap"):
    """The unary score of a logit (section 3); the order is the caller's, never implied.

    ``scale_then_cap``: ``cap * tanh(m * l / cap)`` (z-lab, vLLM S4a);
    ``cap_then_scale``: ``m * cap * tanh(l / cap)`` (vLLM S4b via S6). ``cap`` None: no cap.
    TensorRT-LLM at d70a2287 is ``multiplier=1, cap=None``.
    """
    out = logits.to(F64)
    if order == "scale_then_cap":
        out = out * multiplier
        if cap is not None:
            out = cap * torch.tanh(out / cap)
    elif order == "cap_then_scale":
        if cap is not None:
            out = cap * torch.tanh(out / cap)
        out = out * multiplier
    else:
        raise ValueError(f"unknown order {order!r}")
    return out


def top_candidates(logits, k: int):
    """Per position the ``k`` largest ids, descending; ties keep the lower id first.

    ``logits`` ``[..., V]`` -> ``(ids int64 [..., k], values float64 [..., k])``.
    """
    values = logits.to(F64)
    order = torch.sort(-values, dim=-1, stable=True).indices[..., :k]
    return order, values.gather(-1, order)


def edge_scores(predecessor_codebook, successor_codebook, hidden_projection,
                hidden, candidate_ids, unary, anchors):
    """``S[b, j, p, c]`` of section 4, by its sums.

    ``hidden`` ``[Bq, K, h]`` (final-normed, at the K draft slots); ``candidate_ids`` and
    ``unary`` ``[Bq, K, k]``; ``anchors`` ``[Bq]``; codebooks ``[V, r]``; ``hidden_projection``
    ``[r, h]``. Returns ``[Bq, K, k, k]`` float64 indexed (request, position, predecessor slot,
    candidate slot).
    """
    A = predecessor_codebook.to(F64)
    C = successor_codebook.to(F64)
    W = hidden_projection.to(F64)
    nreq, npos, k = candidate_ids.shape
    out = torch.empty(nreq, npos, k, k, dtype=F64)
    for b in range(nreq):
        for j in range(npos):
            gate = W @ hidden[b, j].to(F64)  # [r]
            for p in range(k):
                pred = int(anchors[b]) if j == 0 else int(candidate_ids[b, j - 1, p])
                for c in range(k):
                    succ = int(candidate_ids[b, j, c])
                    pair = sum(float(A[pred, q] * gate[q] * C[succ, q]) for q in range(A.shape[1]))
                    out[b, j, p, c] = float(unary[b, j, c]) + pair
    return out


def walk(scores, candidate_ids, temperature=None, noise=None):
    """The walk of section 5: greedy, or sampled given ``temperature`` and ``noise``.

    ``scores`` ``[Bq, K, k, k]``; returns ``(realized [Bq, K, k] float64, chosen slots
    [Bq, K] int64, tokens [Bq, K] int64)``. Step 0 enters at predecessor slot 0; each step keeps
    the first maximum of its realized row (sampled: of ``row / temperature + noise[b, j]``, the
    Gumbel-max sample of ``softmax(row / temperature)``) and conditions the next step on it.
    """
    assert (temperature is None) == (noise is None)
    nreq, npos, k, _ = scores.shape
    realized = torch.empty(nreq, npos, k, dtype=F64)
    chosen = torch.empty(nreq, npos, dtype=torch.long)
    tokens = torch.empty(nreq, npos, dtype=torch.long)
    for b in range(nreq):
        prev = 0
        for j in range(npos):
            row = scores[b, j, prev].to(F64)
            pick = row if noise is None else row / temperature + noise[b, j].to(F64)
            best = 0
            for c in range(1, k):
                if pick[c] > pick[best]:
                    best = c
            realized[b, j] = row
            chosen[b, j] = best
            tokens[b, j] = candidate_ids[b, j, best]
            prev = best
    return realized, chosen, tokens


def path_logits(vocab: int, candidate_ids, realized):
    """Full-vocabulary rows the selector leaves (section 5): ``-inf`` but at the candidates,
    which carry the realized row. ``[Bq, K, V]`` float64."""
    nreq, npos, k = candidate_ids.shape
    out = torch.full((nreq, npos, vocab), -math.inf, dtype=F64)
    for b in range(nreq):
        for j in range(npos):
            for c in range(k):
                out[b, j, int(candidate_ids[b, j, c])] = realized[b, j, c]
    return out


def select_path(logits, hidden, anchors, predecessor_codebook, successor_codebook,
                hidden_projection, top_k: int, multiplier: float = 1.0, cap=None,
                order: str = "scale_then_cap", temperature=None, noise=None):
    """Sections 3-5 end to end: ``(tokens [Bq, K], path logits [Bq, K, V])``.

    ``logits`` ``[Bq, K, V]`` are ``lm_head`` of the draft slots' hidden states ``hidden``.
    """
    ids, _ = top_candidates(logits, top_k)
    unary = unary_transform(logits, multiplier, cap, order).gather(-1, ids)
    s = edge_scores(predecessor_codebook, successor_codebook, hidden_projection, hidden, ids,
                    unary, anchors)
    realized, _, tokens = walk(s, ids) if temperature is None else walk(s, ids, temperature, noise)
    return tokens, path_logits(logits.shape[-1], ids, realized)
