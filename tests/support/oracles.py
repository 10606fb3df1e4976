"""Test helpers of their own: the float64 block-attention oracle, a whole draft step built
on it, and a ring-paged cache builder.

Nothing here calls lowering code except constructing the contract's :class:`PagedKV`.
"""

from __future__ import annotations

import math

import torch

from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.lowering.base import PagedKV

from support import oracles_dflash2 as o2


def oracle(q, ctx_k, ctx_v, k_blk, v_blk, causal: bool, window, scale: float, ctx_start=None):
    """Block attention in float64 from the drafter reference, section 2 (the tests' one
    attention oracle).

    ``q`` ``[N, B, Hq, D]``; ``ctx_k[n]``/``ctx_v[n]`` ``[T_n, Hkv, D]`` hold the context
    positions ``ctx_start[n] .. C_n-1`` (``ctx_start`` default 0: every position, so
    ``C_n = T_n``); ``k_blk``/``v_blk`` ``[N, B, Hkv, D]``. Query ``j`` sits at ``C_n + j``.
    Keys no query may see are dropped before the softmax (they may be NaN-poisoned): the
    mask alone decides what is seen. Returns ``out`` ``[N, B, Hq, D]`` and natural ``lse``
    ``[N, B, Hq]``, float64.
    """
    n_seq, b, hq, d = q.shape
    dev = q.device
    outs, lses = [], []
    for n in range(n_seq):
        start = 0 if ctx_start is None else int(ctx_start[n])
        c = start + ctx_k[n].shape[0]
        k = torch.cat([ctx_k[n], k_blk[n]]).double()  # [L, Hkv, D]
        v = torch.cat([ctx_v[n], v_blk[n]]).double()
        p = torch.arange(c, c + b, dtype=torch.float64, device=dev)[:, None]
        t = torch.arange(start, c + b, dtype=torch.float64, device=dev)[None, :]  # key positions
        ok = torch.ones(b, c + b - start, dtype=torch.bool, device=dev)
        if causal:
            ok &= t <= p
        if window is not None:
            ok &= (p - t).abs() <= window - 1
        keep = ok.any(0)
        ok, k, v = ok[:, keep], k[keep], v[keep]
        rep = hq // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)  # [L, Hq, D]
        v = v.repeat_interleave(rep, dim=1)
        s = torch.einsum("jhd,thd->hjt", q[n].double(), k) * scale
        s = torch.where(ok, s, -math.inf)
        lse = torch.logsumexp(s, dim=-1)  # [Hq, B]
        w = torch.exp(s - lse[..., None])
        outs.append(torch.einsum("hjt,thd->jhd", w, v))
        lses.append(lse.T)
    return torch.stack(outs), torch.stack(lses)


def ring_pages_for(window, page_size: int, max_ctx: int) -> int:
    """Ring pages a layer gets: ``ceil((W-1)/P) + 1`` windowed, ``>= ceil(C/P)`` full."""
    if window is not None:
        return math.ceil((window - 1) / page_size) + 1
    return max(1, math.ceil(max_ctx / page_size))


def paged_cache(ctx_k, ctx_v, page_size: int, ring_pages: int, gen: torch.Generator, spare: int = 2):
    """Write every context token, in order, into ring pages of a random physical permutation.

    Token ``t`` of sequence ``n`` goes to ``block_table[n, (t // P) % R]``, slot ``t % P``
    (later tokens overwrite recycled ones). Slots never written and ``spare`` pages no
    sequence owns hold NaN, so a lowering that reads outside the stored tokens shows it.
    """
    n_seq = len(ctx_k)
    hkv, d = ctx_k[0].shape[1:]
    total = n_seq * ring_pages + spare
    perm = torch.randperm(total, generator=gen)
    table = perm[: n_seq * ring_pages].view(n_seq, ring_pages).to(torch.int32)
    kp = torch.full((total, page_size, hkv, d), float("nan"), dtype=ctx_k[0].dtype)
    vp = torch.full_like(kp, float("nan"))
    for n in range(n_seq):
        for t in range(ctx_k[n].shape[0]):
            page = int(table[n, (t // page_size) % ring_pages])
            kp[page, t % page_size] = ctx_k[n][t]
            vp[page, t % page_size] = ctx_v[n][t]
    lens = torch.tensor([k.shape[0] for k in ctx_k], dtype=torch.int32)
    return PagedKV(k_pages=kp, v_pages=vp, block_table=table, ctx_lens=lens)


def make_case(seed: int, ctx_lens, b: int, hq: int, hkv: int, d: int, page_size: int, window, dtype):
    """Fresh random inputs (standard normal, never zeros) and their paged cache."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    n_seq = len(ctx_lens)
    ctx_k = [rnd(c, hkv, d) for c in ctx_lens]
    ctx_v = [rnd(c, hkv, d) for c in ctx_lens]
    q, k_blk, v_blk = rnd(n_seq, b, hq, d), rnd(n_seq, b, hkv, d), rnd(n_seq, b, hkv, d)
    ring = ring_pages_for(window, page_size, max(ctx_lens))
    cache = paged_cache(ctx_k, ctx_v, page_size, ring, gen)
    return dict(q=q, k_blk=k_blk, v_blk=v_blk, ctx_k=ctx_k, ctx_v=ctx_v, cache=cache)


def dspark_heads(config: dict) -> dict:
    """The config's DSpark heads; a plain DFlash config (no ``dspark_config``) has none and
    drafts ``B-1`` tokens (slot 0 is only the anchor)."""
    return config.get("dspark_config") or {"markov_rank": 0, "enable_confidence_head": False,
                                           "confidence_head_with_markov": False, "sample_from_anchor": False}


def draft_oracle(config: dict, w: dict, tgt: dict, hidden: torch.Tensor, anchor: int, ctx_start: int = 0,
                 rope_freqs=None, selector: bool = True, temperature=None, noise=None):
    """One greedy draft step of one sequence in float64, straight from the reference text.

    ``w``: the drafter's tensors by converted name; ``tgt``: the target's
    ``model.embed_tokens.weight`` and ``lm_head.weight``; a ``<linear>.bias`` in ``w`` is added, and
    without ``self_attn.{q,k}_norm.weight`` q and k are roped un-normed. ``hidden [T, n*TGT_H]`` are the target states at positions ``ctx_start..C-1`` (positions
    before ``ctx_start`` must be invisible to every layer). Returns (tokens [K], logits [K, V],
    conf [K] or None). ``rope_freqs``: ``(inv_freq [rot/2] float64, attention_factor)`` of a
    scaled RoPE, computed by the caller's own formula (default: ``theta^(-2i/rot)``, factor 1).

    A DFlash 2 drafter (the record's ``dflash2``) adds, from ``oracles_dflash2`` (float64, written
    from docs/dflash2-reference.md): the block embeddings times ``input_embedding_scale``, every
    sublayer wrapped in its block convolution (the block rows only; context K/V unconvolved), and,
    with ``selector``, the candidate selector's walk at slots ``1..K`` from the anchor (greedy, or
    sampled with ``temperature`` and the Gumbel ``noise [K, k]``); then ``logits`` are its path
    logits (``-inf`` outside the candidates) and the tokens its path.
    """
    f = lambda t: t.double()  # noqa: E731
    w = {k: f(v) for k, v in w.items()}
    resolved = ResolvedDrafter.from_config(config)  # the input's compiled section: norm styles, masks
    ds, norms = dspark_heads(config), resolved.norms
    HQ, HKV, D = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    eps, theta, rot = config["rms_norm_eps"], config["rope_theta"], config["rotary_dim"]

    def norm(x, wt, kind):
        r = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
        return r * (1 + wt) if norms[kind] == "gemma" else r * wt

    def rope(x, pos):  # x [T, H, D]
        half = rot // 2
        inv, m = rope_freqs if rope_freqs is not None else (
            theta ** (-torch.arange(0, rot, 2, dtype=torch.float64) / rot), 1.0)
        ang = pos.double()[:, None] * inv[None, :]
        cos, sin = m * torch.cos(ang)[:, None, :], m * torch.sin(ang)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:rot]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., rot:]], -1)

    def lin(x, name):  # ``x @ W.T (+ b)``: a bias is applied when the checkpoint holds one
        out = x @ w[name + ".weight"].T
        return out + w[name + ".bias"] if name + ".bias" in w else out

    def qk_norm(x, name, kind):  # per-head norm, or none when the checkpoint holds no q/k norms
        return norm(x, w[name], kind) if name in w else x

    def mlp(y, p):
        g, u = lin(y, p + "gate_proj"), lin(y, p + "up_proj")
        if config["hidden_act"] == "silu":
            a = g * torch.sigmoid(g) * u
        else:
            lim, al = config["swiglu_limit"], config["swiglu_alpha"]
            g, u = g.clamp(max=lim), u.clamp(-lim, lim)
            a = g * torch.sigmoid(al * g) * (u + 1)
        return lin(a, p + "down_proj")

    b = config["dflash_config"]["block_size"]
    t = hidden.shape[0]
    c_len = ctx_start + t
    c = norm(f(hidden) @ w["fc.weight"].T, w["hidden_norm.weight"], "hidden_norm")
    emb, head = f(tgt["model.embed_tokens.weight"]), f(tgt["lm_head.weight"])
    x = emb[torch.tensor([anchor] + [config["dflash_config"]["mask_token_id"]] * (b - 1))]
    d2 = resolved.dflash2
    if d2 is not None:
        x = x * d2.input_embedding_scale
    g2 = d2.conv.group_size if d2 is not None else None

    def wrap(sub, rows, conv):  # the sublayer's output, through its block convolution for DFlash 2
        if d2 is None:
            return sub(rows)
        return o2.conv_wrap(sub, rows, w[conv + ".kernel_projection.weight"], w[conv + ".base_kernel"], b, g2)
    pc, pb = torch.arange(ctx_start, c_len), torch.arange(c_len, c_len + b)
    for i, mask in enumerate(resolved.masks):
        p = f"layers.{i}."
        a_ = p + "self_attn."
        if mask.window is not None:
            assert ctx_start == 0 or ctx_start <= c_len - (mask.window - 1), "reference context too short"
        else:
            assert ctx_start == 0, "a full layer needs the whole context"

        def attention(y, a_=a_, mask=mask):  # block rows [b, h] -> o_proj(attn) [b, h]
            q = rope(qk_norm(lin(y, a_ + "q_proj").view(b, HQ, D), a_ + "q_norm.weight", "q_norm"), pb)
            kc = rope(qk_norm(lin(c, a_ + "k_proj").view(t, HKV, D), a_ + "k_norm.weight", "k_norm"), pc)
            kb = rope(qk_norm(lin(y, a_ + "k_proj").view(b, HKV, D), a_ + "k_norm.weight", "k_norm"), pb)
            vs = config["dflash_config"].get("attention_value_scale", 1.0)  # V scaled before attention (MiMo)
            vc = vs * lin(c, a_ + "v_proj").view(t, HKV, D)
            vb = vs * lin(y, a_ + "v_proj").view(b, HKV, D)
            out, _ = oracle(q[None], [kc], [vc], kb[None], vb[None], mask.causal, mask.window,
                            1 / math.sqrt(D), ctx_start=[ctx_start])
            return lin(out[0].reshape(b, HQ * D), a_ + "o_proj")

        x = x + wrap(attention, norm(x, w[p + "input_layernorm.weight"], "input_layernorm"), p + "attention_conv")
        x = x + wrap(lambda v, p=p: mlp(v, p + "mlp."),
                     norm(x, w[p + "post_attention_layernorm.weight"], "post_attention_layernorm"), p + "mlp_conv")
    z = norm(x, w["norm.weight"], "norm")
    logits = z @ head.T
    if d2 is not None and selector:
        sel, u = d2.selector, d2.selector.unary
        toks, rows = o2.select_path(logits[None, 1:], z[None, 1:], torch.tensor([anchor]),
                                    w["candidate_selector.predecessor_codebook"],
                                    w["candidate_selector.successor_codebook"],
                                    w["candidate_selector.hidden_projection.weight"], sel.top_k,
                                    u.multiplier, u.softcap, u.order, temperature,
                                    None if noise is None else noise[None])
        return toks[0], rows[0], None
    first = 0 if ds["sample_from_anchor"] else 1
    prev, toks, rows, confs = anchor, [], [], []
    for j in range(first, b):
        l = logits[j].clone()
        if ds["markov_rank"]:
            l += w["markov_head.markov_w2.weight"] @ w["markov_head.markov_w1.weight"][prev]
        if ds["enable_confidence_head"]:
            feat = z[j]
            if ds["confidence_head_with_markov"]:
                feat = torch.cat([feat, w["markov_head.markov_w1.weight"][prev]])
            confs.append(torch.sigmoid(w["confidence_head.proj.weight"][0] @ feat + w["confidence_head.proj.bias"][0]))
        prev = int(l.argmax())
        toks.append(prev)
        rows.append(l)
    return torch.tensor(toks), torch.stack(rows), (torch.stack(confs) if confs else None)
