"""The DFlash 2 float64 oracle against TensorRT-LLM's own functions (transcribed stand-in).

``oracles_dflash2`` is written from docs/dflash2-reference.md; ``trtllm_dflash2`` (beside this file) is
amukkara/TensorRT-LLM @ d70a2287 ``modeling_dflash.py`` transcribed (see its header). Inputs
are fresh random tensors per seed. Each comparison is a predicate so that the planted-error
tests can show it rejects a wrong convolution, wrong scores and a wrong walk.
"""


import pytest
import torch


from support import oracles_dflash2 as orc  # noqa: E402
import trtllm_dflash2 as trt  # noqa: E402
from support.dflash2_cases import conv_case  # noqa: E402

SEEDS = [0, 1, 2]
F64 = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- convolution


def _conv_agrees(seed, **shape):
    """One side, and the wrapped sublayer, oracle vs TensorRT-LLM, to 1e-10."""
    c = conv_case(seed, **shape)
    conv = trt.DFlash2BlockConv(c["base"], c["projection"], c["taps"], c["group_size"], c["h"])
    d = orc.split_coefficients(orc.conv_coefficients(c["x"], c["projection"]), c["taps"],
                               c["groups"])
    with torch.no_grad():
        side0, coeff1 = conv.prepare(c["x"], c["block"])
        ok = torch.allclose(
            orc.grouped_block_conv(c["x"], d[:, 0], c["base"][0], c["block"], c["group_size"]),
            side0, rtol=0, atol=1e-10)

        def sublayer(rows):
            return torch.tanh(rows @ c["sub"].T)

        ref = trt.dflash2_grouped_conv(c["y"], coeff1, c["base"][1], c["block"], c["group_size"])
        ok &= torch.allclose(
            orc.grouped_block_conv(c["y"], d[:, 1], c["base"][1], c["block"], c["group_size"]),
            ref, rtol=0, atol=1e-10)
        wrapped = conv.finish(sublayer(side0), coeff1, c["block"])
        ok &= torch.allclose(
            orc.conv_wrap(sublayer, c["x"], c["projection"], c["base"], c["block"],
                          c["group_size"]),
            wrapped, rtol=0, atol=1e-10)
    return bool(ok)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("block,taps", [(5, 1), (5, 2), (4, 3), (8, 2), (2, 3)])
def test_grouped_block_conv_matches_trtllm(seed, block, taps):
    assert _conv_agrees(seed, block=block, taps=taps)


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("seed", SEEDS)
def test_layer_placement_matches_dflash_forward_order(seed):
    """The oracle's layer against S1 ``dflash_forward``'s order: fused (residual, norm) pairs,
    ``prepare`` after ``input_layernorm``, ``finish`` after ``o_proj``, the same around the MLP,
    the residual folded into the next norm; the final norm adds the last residual."""
    c = conv_case(seed)
    g = _gen(100 + seed)
    h, block = c["h"], c["block"]
    w_attn = 0.4 * torch.randn(h, h, generator=g, dtype=F64)
    w_mlp = 0.4 * torch.randn(h, h, generator=g, dtype=F64)
    n_in, n_post = (1 + 0.1 * torch.randn(2, h, generator=g, dtype=F64)).unbind(0)
    proj_m = 0.3 * torch.randn_like(c["projection"])
    base_m = torch.randn(c["base"].shape, generator=g, dtype=F64)

    def attn(r):  # a stand-in sublayer mixing rows of a block, as attention does
        return torch.tanh(r @ w_attn.T) + r.roll(1, 0)

    def mlp(r):
        return torch.tanh(r @ w_mlp.T)

    expected = orc.dflash2_layer(
        c["x"], attn, mlp, lambda r: _rms(r, n_in), lambda r: _rms(r, n_post),
        (c["projection"], c["base"]), (proj_m, base_m), block, c["group_size"])

    conv_a = trt.DFlash2BlockConv(c["base"], c["projection"], c["taps"], c["group_size"], h)
    conv_m = trt.DFlash2BlockConv(base_m, proj_m, c["taps"], c["group_size"], h)
    with torch.no_grad():
        residual = c["x"].clone()  # layer 0: residual = hidden_states; normed = norm(hidden)
        normed = _rms(c["x"], n_in)
        normed, coeff = conv_a.prepare(normed, block)
        out = conv_a.finish(attn(normed), coeff, block)
        residual = out + residual  # post_attention_layernorm(hidden_out, res_flat)
        out = _rms(residual, n_post)
        out, coeff = conv_m.prepare(out, block)
        out = conv_m.finish(mlp(out), coeff, block)
        final = out + residual  # model.norm(hidden, residual) adds before normalising
    torch.testing.assert_close(expected, final, rtol=0, atol=1e-10)


# --------------------------------------------------------------------------- selector


def _selector_case(seed, nreq=2, npos=4, k=4, vocab=50, rank=6, h=10):
    g = _gen(1000 + seed)
    return dict(
        pred=torch.randn(vocab, rank, generator=g, dtype=F64),
        succ=torch.randn(vocab, rank, generator=g, dtype=F64),
        proj=torch.randn(rank, h, generator=g, dtype=F64),
        hidden=torch.randn(nreq, npos, h, generator=g, dtype=F64),
        logits=3 * torch.randn(nreq, npos, vocab, generator=g, dtype=F64),
        anchors=torch.randint(vocab, (nreq,), generator=g),
        k=k, vocab=vocab, rank=rank,
    )


def _trt_selector(c):
    return trt.DFlash2CandidateSelector(c["pred"], c["succ"], c["proj"], c["k"], c["vocab"],
                                        c["rank"])


def _scores_agree(seed):
    """Edge scores: oracle (float64) vs TensorRT-LLM (fp32 accumulation), to fp32 precision."""
    c = _selector_case(seed)
    unary, ids = torch.topk(c["logits"], c["k"], dim=-1)  # DFlashWorker._dflash2_global_top_k
    with torch.no_grad():
        ref = _trt_selector(c)(ids, unary, c["hidden"], c["anchors"])
    got = orc.edge_scores(c["pred"], c["succ"], c["proj"], c["hidden"], ids, unary, c["anchors"])
    return ref.dtype == torch.float32 and torch.allclose(got, ref.double(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("seed", SEEDS)
def test_edge_scores_match_trtllm(seed):
    assert _scores_agree(seed)


def _walk_agrees(seed):
    """Walk over TensorRT-LLM's own fp32 scores: realized rows equal, and the oracle's
    tokens are the candidates TensorRT-LLM's argmax picks."""
    c = _selector_case(seed)
    unary, ids = torch.topk(c["logits"], c["k"], dim=-1)
    with torch.no_grad():
        scores = _trt_selector(c)(ids, unary, c["hidden"], c["anchors"])
        ref = trt.dflash2_walk_candidate_paths(ids, scores)
    realized, chosen, tokens = orc.walk(scores.double(), ids)
    return (torch.equal(realized, ref.double())
            and torch.equal(chosen, ref.argmax(-1))
            and torch.equal(tokens, ids.gather(-1, ref.argmax(-1, keepdim=True)).squeeze(-1)))


@pytest.mark.parametrize("seed", SEEDS)
def test_walk_matches_trtllm(seed):
    assert _walk_agrees(seed)


def _path_agrees(seed):
    """Sections 3-5 end to end against ``DFlashForCausalLM.select_candidate_path`` fed as
    ``DFlashWorker._apply_dflash2_selector`` feeds it (one rank: ``torch.topk``)."""
    c = _selector_case(seed)
    wrapper = trt.DFlashForCausalLM.__new__(trt.DFlashForCausalLM)
    torch.nn.Module.__init__(wrapper)
    wrapper.candidate_selector = _trt_selector(c)
    unary, ids = torch.topk(c["logits"], c["k"], dim=-1)
    with torch.no_grad():
        rewritten = wrapper.select_candidate_path(c["logits"].float().clone(), ids, unary,
                                                  c["hidden"], c["anchors"])
    tokens, path = orc.select_path(c["logits"], c["hidden"], c["anchors"], c["pred"], c["succ"],
                                   c["proj"], c["k"])
    finite = torch.isfinite(path)
    return (torch.equal(finite, torch.isfinite(rewritten))
            and torch.equal(rewritten.argmax(-1), tokens)
            and torch.allclose(path[finite], rewritten[finite].double(), rtol=1e-5, atol=1e-4))


@pytest.mark.parametrize("seed", SEEDS)
def test_select_path_matches_trtllm(seed):
    assert _path_agrees(seed)


# --------------------------------------------------------------------------- planted errors


def _conv_delta_of_source_row(y, delta, base, block, group_size):
    """Wrong: coefficient of the row read (``t - i``) instead of the row written."""
    y, delta, base = y.double(), delta.double(), base.double()
    group_of = torch.arange(y.shape[1]) // group_size
    out = torch.zeros_like(y)
    for row in range(y.shape[0]):
        for tap in range(min(base.shape[0], row % block + 1)):
            out[row] += (base[tap] + delta[row - tap, tap, group_of]) * y[row - tap]
    return out


def _conv_crosses_blocks(y, delta, base, block, group_size):
    """Wrong: taps reach into the previous request's block."""
    y, delta, base = y.double(), delta.double(), base.double()
    group_of = torch.arange(y.shape[1]) // group_size
    out = torch.zeros_like(y)
    for row in range(y.shape[0]):
        for tap in range(min(base.shape[0], row + 1)):
            out[row] += (base[tap] + delta[row, tap, group_of]) * y[row - tap]
    return out


def _conv_interleaved_groups(y, delta, base, block, group_size):
    """Wrong: channel ``c`` in group ``c % G`` instead of ``c // group_size``."""
    y, delta, base = y.double(), delta.double(), base.double()
    group_of = torch.arange(y.shape[1]) % (y.shape[1] // group_size)
    out = torch.zeros_like(y)
    for row in range(y.shape[0]):
        for tap in range(min(base.shape[0], row % block + 1)):
            out[row] += (base[tap] + delta[row, tap, group_of]) * y[row - tap]
    return out


def _scores_predecessor_same_position(A, C, W, hidden, ids, unary, anchors):
    """Wrong: position ``j``'s predecessors taken from position ``j`` (not ``j - 1``)."""
    return _loop_scores(A, C, hidden, ids, unary, anchors, lambda b, j: W.double() @ hidden[b, j],
                        lambda b, j, p: int(anchors[b]) if j == 0 else int(ids[b, j, p]))


def _scores_without_gate(A, C, W, hidden, ids, unary, anchors):
    """Wrong: the hidden-state gate left out (``<A(a), B(b)>`` only)."""
    return _loop_scores(A, C, hidden, ids, unary, anchors,
                        lambda b, j: torch.ones(A.shape[1], dtype=F64),
                        lambda b, j, p: int(anchors[b]) if j == 0 else int(ids[b, j - 1, p]))


def _loop_scores(A, C, hidden, ids, unary, anchors, gate_of, pred_of):
    out = torch.empty(*ids.shape, ids.shape[-1], dtype=F64)
    for b in range(ids.shape[0]):
        for j in range(ids.shape[1]):
            gate = gate_of(b, j)
            for p in range(ids.shape[2]):
                pred = pred_of(b, j, p)
                for c in range(ids.shape[2]):
                    out[b, j, p, c] = float(unary[b, j, c]) + float(
                        (A[pred].double() * gate * C[int(ids[b, j, c])].double()).sum())
    return out


def _walk_always_first_row(scores, ids):
    """Wrong: every step read under predecessor slot 0 (the walk not conditioned)."""
    realized = scores[:, :, 0].double()
    chosen = realized.argmax(-1)
    return realized, chosen, ids.gather(-1, chosen[..., None]).squeeze(-1)


PLANTED = [
    ("grouped_block_conv", _conv_delta_of_source_row, _conv_agrees),
    ("grouped_block_conv", _conv_crosses_blocks, _conv_agrees),
    ("grouped_block_conv", _conv_interleaved_groups, _conv_agrees),
    ("edge_scores", _scores_predecessor_same_position, _scores_agree),
    ("edge_scores", _scores_without_gate, _scores_agree),
    ("walk", _walk_always_first_row, _walk_agrees),
]


@pytest.mark.parametrize("name,mutant,agrees", PLANTED, ids=[m.__name__ for _, m, _ in PLANTED])
def test_planted_error_fails_the_comparison(monkeypatch, name, mutant, agrees):
    """Each comparison accepts the oracle (above) and rejects the planted error, on at least
    one seed; the end-to-end path check rejects every selector error as well."""
    monkeypatch.setattr(orc, name, mutant)
    assert not all(agrees(seed) for seed in SEEDS)
    if name != "grouped_block_conv":
        assert not all(_path_agrees(seed) for seed in SEEDS)


def _wrap_sides_swapped(sublayer, x, projection, base_kernel, block, group_size):
    """Wrong: the output side's base kernel on the input and vice versa."""
    return orc_conv_wrap(sublayer, x, projection, base_kernel.flip(0), block, group_size)


def _wrap_output_reprojected(sublayer, x, projection, base_kernel, block, group_size):
    """Wrong: the output side's coefficients projected from the sublayer's output."""
    taps, h = base_kernel.shape[1], base_kernel.shape[2]
    groups = h // group_size
    d_in = orc.split_coefficients(orc.conv_coefficients(x, projection), taps, groups)
    inner = orc.grouped_block_conv(x, d_in[:, 0], base_kernel[0], block, group_size)
    out = sublayer(inner)
    d_out = orc.split_coefficients(orc.conv_coefficients(out, projection), taps, groups)
    return orc.grouped_block_conv(out, d_out[:, 1], base_kernel[1], block, group_size)


orc_conv_wrap = orc.conv_wrap


@pytest.mark.parametrize("mutant", [_wrap_sides_swapped, _wrap_output_reprojected],
                         ids=lambda m: m.__name__)
def test_planted_wrap_error_fails(monkeypatch, mutant):
    monkeypatch.setattr(orc, "conv_wrap", mutant)
    assert not all(_conv_agrees(seed) for seed in SEEDS)


def test_planted_residual_before_output_conv_fails(monkeypatch):
    """Wrong: the residual added before the output-side convolution."""

    def layer(x, attn, mlp, norm_in, norm_post, conv_attn, conv_mlp, block, group_size):
        def wrap_with_residual(sub, x_res, normed, proj, base):
            return orc_conv_wrap(lambda r: sub(r) + x_res, normed, proj, base, block, group_size)

        x = wrap_with_residual(attn, x, norm_in(x), *conv_attn)
        return wrap_with_residual(mlp, x, norm_post(x), *conv_mlp)

    monkeypatch.setattr(orc, "dflash2_layer", layer)
    with pytest.raises(AssertionError):
        test_layer_placement_matches_dflash_forward_order(0)


# --------------------------------------------------------------------------- disagreements


def test_zlab_unary_transform_changes_the_path_trtllm_takes():
    """Disagreement row 1: z-lab's published ``output_multiplier`` / ``final_logit_softcapping``
    (S8b) keep the candidate set but change the chosen path against TensorRT-LLM's raw logits."""
    m, cap = 0.19611613513818404, 20.0
    differs = 0
    for seed in range(6):
        c = _selector_case(seed)
        c["logits"] = 12 * c["logits"]
        raw, _ = orc.select_path(c["logits"], c["hidden"], c["anchors"], c["pred"], c["succ"],
                                 c["proj"], c["k"])
        zlab, _ = orc.select_path(c["logits"], c["hidden"], c["anchors"], c["pred"], c["succ"],
                                  c["proj"], c["k"], multiplier=m, cap=cap)
        same_set = torch.equal(orc.top_candidates(c["logits"], c["k"])[0],
                               orc.top_candidates(orc.unary_transform(c["logits"], m, cap),
                                                  c["k"])[0])
        assert same_set
        differs += int(not torch.equal(raw, zlab))
    assert differs > 0


# --------------------------------------------------------------------------- refusals (S1)


def test_trtllm_detects_the_zlab_layout_as_dflash2():
    """S8b's ``architectures`` is DFlash 2 to S1; plain DFlash labels are not."""
    from types import SimpleNamespace as NS

    assert trt._is_dflash2_architecture(NS(architectures=["DFlash2DraftModel"]))
    assert not trt._is_dflash2_architecture(NS(architectures=["DFlashDraftModel"]))


@pytest.mark.parametrize("taps,group,rank,top_k,ok", [
    (2, 16, 256, 16, True), (0, 16, 256, 16, False), (2, 16, 256, 1, False),
])
def test_trtllm_requires_the_full_recipe(taps, group, rank, top_k, ok):
    w = trt.DFlashForCausalLM.__new__(trt.DFlashForCausalLM)
    w._dflash2_conv_taps, w._dflash2_conv_group_size = taps, group
    w._dflash2_selector_rank, w._dflash2_selector_top_k = rank, top_k
    if ok:
        w._validate_dflash2_config()
    else:
        with pytest.raises(ValueError):
            w._validate_dflash2_config()
