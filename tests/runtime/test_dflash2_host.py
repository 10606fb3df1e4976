"""The host's DFlash 2 modules (framework/runtime/dflash2.py) against the float64 oracle.

``oracles_dflash2`` is written from docs/dflash2-reference.md with its own loops; here every
input is a fresh random tensor per seed, rounded to the dtype under test, and the oracle sees
the same rounded values in float64. Comparisons are predicates so that the planted errors
(a perturbed coefficient, a wrong group, a shifted predecessor, an unconditioned walk) can
show they reject a wrong host.
"""

import math

import pytest
import torch

from support import oracles_dflash2 as orc
from draftsmith.framework.errors import UserError
from draftsmith.framework.runtime import dflash2 as d2
from support.dflash2_cases import conv_case  # noqa: E402

SEEDS = [0, 1, 2]
DTYPES = [torch.float32, torch.bfloat16]
F64 = torch.float64
# max |host - oracle| <= TOL * max(1, max |oracle|): float32 compute, and bf16 rows/outputs.
TOL = {torch.float32: 2e-6, torch.bfloat16: 3e-2}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _close(got, ref, dtype) -> bool:
    got, ref = got.to(F64), ref.to(F64)
    return bool((got - ref).abs().max() <= TOL[dtype] * max(1.0, float(ref.abs().max())))


# --------------------------------------------------------------------------- convolution


def _conv_module(c, projection=None, base=None):
    conv = d2.BlockConv(c["h"], c["taps"], c["group_size"]).to(c["dtype"])
    with torch.no_grad():
        conv.base_kernel.copy_(c["base"] if base is None else base)
        conv.kernel_projection.weight.copy_(c["projection"] if projection is None else projection)
    return conv


def _sublayer(weight):
    def run(rows):
        return torch.tanh(rows.to(F64) @ weight.to(F64).T).to(rows.dtype)
    return run


def _conv_agrees(seed, dtype, plant=None, **shape):
    """One side and the wrapped sublayer, host vs oracle. ``plant(c) -> (projection, base)``
    loads wrong weights into the host module."""
    c = conv_case(seed, dtype=dtype, **shape)
    projection, base = plant(c) if plant else (None, None)
    conv = _conv_module(c, projection, base)
    d = orc.split_coefficients(orc.conv_coefficients(c["x"], c["projection"]), c["taps"],
                               c["groups"])
    with torch.no_grad():
        side0, coeff1 = conv.prepare(c["x"], c["block"])
        ok = side0.dtype == dtype and _close(
            side0, orc.grouped_block_conv(c["x"], d[:, 0], c["base"][0], c["block"],
                                          c["group_size"]), dtype)
        ok &= _close(d2.grouped_block_conv(c["y"], d[:, 1].to(dtype), c["base"][1], c["block"],
                                           c["group_size"]),
                     orc.grouped_block_conv(c["y"], d[:, 1], c["base"][1], c["block"],
                                            c["group_size"]), dtype)
        ok &= _close(conv.wrap(_sublayer(c["sub"]), c["x"], c["block"]),
                     orc.conv_wrap(_sublayer(c["sub"]), c["x"], c["projection"], c["base"],
                                   c["block"], c["group_size"]), dtype)
    return bool(ok)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("block,taps", [(5, 1), (5, 2), (4, 3), (2, 3)])
def test_block_conv_matches_oracle(dtype, seed, block, taps):
    assert _conv_agrees(seed, dtype, block=block, taps=taps)


def _rms(w):
    def run(rows):
        r = rows.to(F64)
        return (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6) * w.to(F64)).to(rows.dtype)
    return run


def _layer_agrees(seed, dtype):
    c = conv_case(seed, dtype=dtype)
    g = _gen(100 + seed)
    h = c["h"]
    w_attn, w_mlp = (0.4 * torch.randn(2, h, h, generator=g, dtype=F64)).to(dtype).unbind(0)
    n_in, n_post = (1 + 0.1 * torch.randn(2, h, generator=g, dtype=F64)).to(dtype).unbind(0)
    proj_m = (0.3 * torch.randn(c["projection"].shape, generator=g, dtype=F64)).to(dtype)
    base_m = torch.randn(c["base"].shape, generator=g, dtype=F64).to(dtype)

    def attn(rows):  # mixes rows of a block, as attention does
        return (_sublayer(w_attn)(rows).to(F64) + rows.to(F64).roll(1, 0)).to(rows.dtype)

    expected = orc.dflash2_layer(c["x"], attn, _sublayer(w_mlp), _rms(n_in), _rms(n_post),
                                 (c["projection"], c["base"]), (proj_m, base_m), c["block"],
                                 c["group_size"])
    conv_m = _conv_module(c, proj_m, base_m)
    with torch.no_grad():
        got = d2.layer_forward(c["x"], c["block"], attn=attn, mlp=_sublayer(w_mlp),
                               norm_in=_rms(n_in), norm_post=_rms(n_post),
                               attention_conv=_conv_module(c), mlp_conv=conv_m)
    return _close(got, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed", SEEDS)
def test_layer_wraps_match_oracle(dtype, seed):
    assert _layer_agrees(seed, dtype)


def test_identity_kernels_are_dflash1():
    """``base[:, 0] = 1``, ``base[:, 1:] = 0``, projection 0: every wrap is the sublayer."""
    c = conv_case(0, dtype=torch.float32)
    base = torch.zeros_like(c["base"])
    base[:, 0] = 1
    conv = _conv_module(c, torch.zeros_like(c["projection"]), base)
    with torch.no_grad():
        got = conv.wrap(_sublayer(c["sub"]), c["x"], c["block"])
    assert torch.equal(got, _sublayer(c["sub"])(c["x"]))


# planted convolution errors: each is a wrong host; the comparison must reject it at the
# tolerance of the dtype under test. One weight moves by PLANT (weights are ~1): small, yet
# beyond what that dtype's tolerance forgives.
PLANT = {torch.float32: 1e-3, torch.bfloat16: 0.5}

def _perturb_base(c):
    base = c["base"].clone()
    base[1, 1, 5] += PLANT[c["dtype"]]
    return None, base


def _perturb_projection(c):
    projection = c["projection"].clone()
    projection[c["taps"] * c["groups"] + 2, 7] += PLANT[c["dtype"]]  # output side, tap 0
    return projection, None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("plant", [_perturb_base, _perturb_projection], ids=lambda p: p.__name__)
def test_planted_coefficient_fails(dtype, plant):
    assert all(_conv_agrees(s, dtype) for s in SEEDS)
    assert not any(_conv_agrees(s, dtype, plant) for s in SEEDS)


def _interleaved_groups(hidden, group_size, device=None):
    """Wrong: channel ``c`` in group ``c % G`` instead of ``c // group_size``."""
    return torch.arange(hidden, device=device) % (hidden // group_size)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_planted_wrong_group_fails(monkeypatch, dtype):
    monkeypatch.setattr(d2, "group_index", _interleaved_groups)
    assert not any(_conv_agrees(s, dtype) for s in SEEDS)
    assert not any(_layer_agrees(s, dtype) for s in SEEDS)


# --------------------------------------------------------------------------- selector

UNARIES = {
    "trtllm_raw": (1.0, None, "scale_then_cap"),
    "zlab_scale_then_cap": (0.19611613513818404, 20.0, "scale_then_cap"),
    "vllm_s4b_cap_then_scale": (0.19611613513818404, 20.0, "cap_then_scale"),
}


def _selector_case(seed, dtype, nreq=2, npos=4, k=4, vocab=50, rank=6, h=10):
    g = _gen(1000 + seed)

    def rnd(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=g, dtype=F64)).to(dtype)

    return dict(pred=rnd(vocab, rank), succ=rnd(vocab, rank), proj=rnd(rank, h),
                hidden=rnd(nreq, npos, h), logits=rnd(nreq, npos, vocab, scale=3.0),
                anchors=torch.randint(vocab, (nreq,), generator=g), k=k, vocab=vocab,
                rank=rank, h=h, dtype=dtype)


def _selector(c, unary=UNARIES["trtllm_raw"], chain=d2.Chain("greedy", None)):
    sel = d2.CandidateSelector(c["h"], c["vocab"], c["rank"], c["k"], d2.UnaryTransform(*unary),
                               chain).to(c["dtype"])
    with torch.no_grad():
        sel.predecessor_codebook.copy_(c["pred"])
        sel.successor_codebook.copy_(c["succ"])
        sel.hidden_projection.weight.copy_(c["proj"])
    return sel


def _scores_agree(seed, dtype):
    c = _selector_case(seed, dtype)
    with torch.no_grad():
        ids, got = _selector(c).scores(c["logits"], c["hidden"], c["anchors"])
    ref_ids, ref_unary = orc.top_candidates(c["logits"], c["k"])
    ref = orc.edge_scores(c["pred"], c["succ"], c["proj"], c["hidden"], ref_ids, ref_unary,
                          c["anchors"])
    # the scores are float32 over dtype-rounded inputs: float32 tolerance at both dtypes
    return got.dtype == torch.float32 and torch.equal(ids, ref_ids) and _close(
        got, ref, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed", SEEDS)
def test_edge_scores_match_oracle(dtype, seed):
    assert _scores_agree(seed, dtype)


def _path_agrees(seed, dtype, unary="trtllm_raw"):
    """Greedy selector end to end: tokens equal, path logits equal where finite, ``-inf``
    at the same places, argmax of the path logits = the tokens."""
    c = _selector_case(seed, dtype)
    with torch.no_grad():
        out = _selector(c, UNARIES[unary])(c["logits"], c["hidden"], c["anchors"], None)
    tokens, path = orc.select_path(c["logits"], c["hidden"], c["anchors"], c["pred"], c["succ"],
                                   c["proj"], c["k"], *UNARIES[unary])
    finite = torch.isfinite(path)
    return (torch.equal(out.tokens, tokens) and torch.equal(torch.isfinite(out.logits), finite)
            and torch.equal(out.logits.argmax(-1), tokens)
            and torch.equal(out.candidates, orc.top_candidates(c["logits"], c["k"])[0])
            and _close(out.logits[finite], path[finite], torch.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("unary", sorted(UNARIES))
def test_greedy_path_matches_oracle(dtype, seed, unary):
    assert _path_agrees(seed, dtype, unary)


def test_unary_order_is_honoured():
    """The two orders differ unless ``m = 1`` (disagreement row 2), each as the oracle."""
    logits = 40 * torch.randn(3, 7, generator=_gen(5), dtype=F64)
    got = {o: d2.UnaryTransform(0.19611613513818404, 20.0, o)(logits.float())
           for o in d2.UNARY_ORDERS}
    for o in d2.UNARY_ORDERS:
        assert _close(got[o], orc.unary_transform(logits, 0.19611613513818404, 20.0, o),
                      torch.float32)
    assert not _close(got["scale_then_cap"], got["cap_then_scale"], torch.float32)


def _sampled_walk_f64(scores, ids, temperature, noise):
    """The test's own sampled chain: step ``j`` takes the first maximum of
    ``S[j, p_j] / T + noise[j]`` and conditions step ``j+1`` on that slot."""
    nreq, npos, k, _ = scores.shape
    tokens = torch.empty(nreq, npos, dtype=torch.long)
    for b in range(nreq):
        prev = 0
        for j in range(npos):
            row = [float(scores[b, j, prev, c]) / temperature + float(noise[b, j, c])
                   for c in range(k)]
            prev = max(range(k), key=lambda c: (row[c], -c))
            tokens[b, j] = ids[b, j, prev]
    return tokens


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed", SEEDS)
def test_sampled_chain_follows_the_sampled_slot(dtype, seed):
    c = _selector_case(seed, dtype)
    temperature = 0.7
    chain = d2.Chain("sampled", temperature)
    sel = _selector(c, chain=chain)
    gen = _gen(7 + seed)
    with torch.no_grad():
        out = sel(c["logits"], c["hidden"], c["anchors"], gen)
        ids, s = sel.scores(c["logits"], c["hidden"], c["anchors"])
    noise = d2.gumbel_noise(ids.shape, _gen(7 + seed))  # the draw the selector made
    ref_ids, ref_unary = orc.top_candidates(c["logits"], c["k"])
    ref = orc.edge_scores(c["pred"], c["succ"], c["proj"], c["hidden"], ref_ids, ref_unary,
                          c["anchors"])
    assert torch.equal(out.tokens, _sampled_walk_f64(ref, ref_ids, temperature, noise))
    realized, _, _ = d2.walk(s, ids, chain, noise)
    assert torch.equal(out.realized, realized)


def test_sampled_and_greedy_chains_differ_somewhere():
    """Disagreement row 3 is real: a sampled chain leaves the greedy path on some draw."""
    c = _selector_case(0, torch.float32)
    greedy = _selector(c)(c["logits"], c["hidden"], c["anchors"], None).tokens
    sampled = _selector(c, chain=d2.Chain("sampled", 2.0))
    gen = _gen(3)
    assert any(not torch.equal(sampled(c["logits"], c["hidden"], c["anchors"], gen).tokens,
                               greedy) for _ in range(20))


def test_gumbel_argmax_samples_the_softmax():
    row = torch.tensor([1.0, 0.2, -0.5, 0.9], dtype=F64)
    temperature = 0.8
    noise = d2.gumbel_noise((40000, 4), _gen(11))
    freq = torch.bincount((row.float() / temperature + noise).argmax(-1), minlength=4) / 40000
    assert torch.allclose(freq.double(), torch.softmax(row / temperature, -1), atol=0.012)


def _shifted_predecessor(candidate_ids, anchors):
    """Wrong: position ``j``'s predecessors read at position ``j`` (not ``j - 1``)."""
    return candidate_ids.clone()


def _walk_unconditioned(scores, candidate_ids, chain, noise):
    """Wrong: every step read under predecessor slot 0."""
    realized = scores[:, :, 0].float()
    chosen = realized.argmax(-1)
    return realized, chosen, candidate_ids.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_planted_shifted_predecessor_fails(monkeypatch, dtype):
    monkeypatch.setattr(d2, "predecessor_ids", _shifted_predecessor)
    assert not any(_scores_agree(s, dtype) for s in SEEDS)
    assert not all(_path_agrees(s, dtype) for s in SEEDS)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_planted_unconditioned_walk_fails(monkeypatch, dtype):
    monkeypatch.setattr(d2, "walk", _walk_unconditioned)
    assert not all(_path_agrees(s, dtype) for s in SEEDS)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_planted_codebook_entry_fails(dtype):
    """A perturbed successor codebook row of one candidate moves its scores."""
    c = _selector_case(0, dtype)
    ids, _ = orc.top_candidates(c["logits"], c["k"])
    sel = _selector(c)
    with torch.no_grad():
        sel.successor_codebook[int(ids[0, 1, 0])] += 0.5
        _, got = sel.scores(c["logits"], c["hidden"], c["anchors"])
    ref = orc.edge_scores(c["pred"], c["succ"], c["proj"], c["hidden"], ids,
                          orc.top_candidates(c["logits"], c["k"])[1], c["anchors"])
    assert not _close(got, ref, torch.float32)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("build", [
    lambda: d2.BlockConv(12, 2, 5),                      # group size does not divide hidden
    lambda: d2.BlockConv(12, 0, 3),                      # no taps
    lambda: d2.BlockConv(12, True, 3),                   # a bool is not a count
    lambda: d2.CandidateSelector(10, 50, 6, 1, d2.UnaryTransform(1.0, None, "scale_then_cap"),
                                 d2.Chain("greedy", None)),   # top_k < 2
    lambda: d2.CandidateSelector(10, 3, 6, 4, d2.UnaryTransform(1.0, None, "scale_then_cap"),
                                 d2.Chain("greedy", None)),   # top_k > vocab
    lambda: d2.UnaryTransform(1.0, None, "scale"),
    lambda: d2.UnaryTransform(1.0, 0.0, "scale_then_cap"),
    lambda: d2.UnaryTransform(math.nan, None, "scale_then_cap"),
    lambda: d2.Chain("greedy", 1.0),
    lambda: d2.Chain("sampled", None),
    lambda: d2.Chain("sampled", 0.0),
    lambda: d2.Chain("beam", None),
])
def test_bad_knobs_are_refused_in_one_line(build):
    with pytest.raises(UserError) as err:
        build()
    assert len(err.value.problems) == 1 and "\n" not in err.value.problems[0]
    assert err.value.problems[0].startswith("dflash2: ")


def test_walk_refuses_noise_that_does_not_fit_the_chain():
    s = torch.zeros(1, 2, 3, 3)
    ids = torch.zeros(1, 2, 3, dtype=torch.long)
    with pytest.raises(UserError):
        d2.walk(s, ids, d2.Chain("sampled", 1.0), None)
    with pytest.raises(UserError):
        d2.walk(s, ids, d2.Chain("greedy", None), torch.zeros(1, 2, 3))


def test_tied_logits_keep_the_lower_id_first():
    """Exact ties (bf16 makes them common) decide the set and order by id, as the oracle."""
    logits = torch.tensor([[0.5, 2.0, 1.0, 2.0, 1.0, 1.0, -3.0]], dtype=torch.bfloat16)
    ids, values = d2.top_candidates(logits, 4)
    assert ids.tolist() == [[1, 3, 2, 4]] == orc.top_candidates(logits, 4)[0].tolist()
    assert values.tolist() == [[2.0, 2.0, 1.0, 1.0]]
