"""llama.cpp's DFlash 2 (transcribed stand-in) against the float64 oracle.

``llamacpp_dflash2`` (beside this file) restates ggml-org/llama.cpp @ 01b78a15 ``src/models/dflash.cpp``
and ``common/speculative.cpp`` (and the earlier in-graph lattice, see its header);
``oracles_dflash2`` is written from docs/dflash2-reference.md. Where llama.cpp agrees the
comparison is to float64 rounding (1e-10; different summation order only); where it differs
(docs/dflash2-reference.md section 7, llama.cpp rows) the test asserts that difference. Fresh
random inputs per seed; CPU, float64 unless a test says float32.
"""


import pytest
import torch


import llamacpp_dflash2 as lcpp  # noqa: E402
from support import oracles_dflash2 as orc  # noqa: E402
from support.dflash2_cases import conv_case  # noqa: E402

F64 = torch.float64
SEEDS = [0, 1, 2]
ZLAB = "zlab_dflash2"


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _hp(scale=None, cap=None, **dflash):
    meta = {"dflash.target_layers": [1, 2]}
    if scale is not None:
        meta["dflash.logit_scale"] = scale
    if cap is not None:
        meta["dflash.final_logit_softcapping"] = cap
    for k, v in dflash.items():
        meta[f"dflash.{k}"] = v
    return lcpp.load_hparams(meta)


# --------------------------------------------------------------------------- hparams


def test_absent_keys_and_refusals():
    hp = _hp()
    assert hp["f_logit_scale"] == 0.0 and hp["f_final_logit_softcapping"] == 0.0
    assert hp["dflash_selector_top_k"] is None
    with pytest.raises(RuntimeError, match="missing conv/selector metadata"):
        lcpp.check_dflash2(hp, n_embd=64)
    ok = _hp(block_size=8, conv_kernel_size=2, conv_group_size=16, selector_rank=8,
             selector_top_k=4)
    lcpp.check_dflash2(ok, n_embd=64)
    with pytest.raises(RuntimeError, match="divisible by conv_group_size"):
        lcpp.check_dflash2(ok, n_embd=72)
    with pytest.raises(RuntimeError, match="too small for the selector lattice"):
        lcpp.check_dflash2(ok, n_embd=16)
    with pytest.raises(RuntimeError, match="target_layers"):
        lcpp.load_hparams({})
    # absent scale and cap: the unary score is the raw logit (the oracle's identity transform)
    logits = 4 * torch.randn(3, 50, generator=_gen(3), dtype=F64)
    assert torch.equal(lcpp.logit_transform(logits, hp), orc.unary_transform(logits, 1.0, None))


# --------------------------------------------------------------------------- convolution


def _conv_agrees(c, tol):
    d = orc.split_coefficients(orc.conv_coefficients(c["x"], c["projection"]), c["taps"], c["groups"])
    dyn = c["x"] @ c["projection"].T
    args = (c["nreq"], c["taps"], c["group_size"])
    ok = True
    for side, rows in ((0, c["x"]), (1, c["y"])):
        got = lcpp.block_conv(rows, dyn, c["base"], side, *args)
        want = orc.grouped_block_conv(rows, d[:, side], c["base"][side], c["block"], c["group_size"])
        ok &= torch.allclose(got.double(), want, rtol=tol, atol=tol)

    def sub(rows):
        return torch.tanh(rows @ c["sub"].T)

    def attn(rows):  # mixes rows of a block, as attention does
        return torch.tanh(rows @ c["sub"].T) + rows.roll(1, 0)

    def norm(rows):
        return rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-6)

    got = lcpp.conv_wrap(sub, c["x"], c["projection"], c["base"], *args)
    want = orc.conv_wrap(lambda r: sub(r.to(c["x"].dtype)).double(), c["x"], c["projection"], c["base"],
                         c["block"], c["group_size"])
    ok &= torch.allclose(got.double(), want, rtol=tol, atol=tol)
    got = lcpp.layer(c["x"], attn, sub, norm, norm, (c["projection"], c["base"]),
                     (c["projection_m"], c["base_m"]), *args)
    cast = lambda f: (lambda r: f(r.to(c["x"].dtype)).double())  # noqa: E731
    want = orc.dflash2_layer(c["x"], cast(attn), cast(sub), cast(norm), cast(norm),
                             (c["projection"], c["base"]), (c["projection_m"], c["base_m"]), c["block"],
                             c["group_size"])
    ok &= torch.allclose(got.double(), want, rtol=tol, atol=tol)
    return bool(ok)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("block,taps", [(5, 2), (4, 3), (2, 3), (8, 1)])
def test_block_conv_matches_oracle(seed, block, taps):
    """build_dflash2_conv, its wrap and the layer's residual order: the oracle's section 2."""
    assert _conv_agrees(conv_case(seed, block=block, taps=taps), 1e-10)


def test_block_conv_float32_within_float32_rounding():
    assert _conv_agrees(conv_case(4, block=8, dtype=torch.float32), 1e-4)


def test_planted_conv_coefficient_of_source_row_fails():
    """The comparison sees a coefficient read from row ``t - i`` instead of row ``t``."""
    c = conv_case(5, block=6, taps=3)
    orig = lcpp.block_conv

    def planted(hidden, dynamic, base, side, n_blocks, kernel, group_size):
        shifted = torch.cat((dynamic[:1], dynamic[:-1]))  # previous row's coefficients
        mixed = torch.where((torch.arange(hidden.shape[0]) % (hidden.shape[0] // n_blocks) > 0)[:, None],
                            shifted, dynamic)
        return orig(hidden, mixed, base, side, n_blocks, kernel, group_size)

    lcpp.block_conv = planted
    try:
        assert not _conv_agrees(c, 1e-6)
    finally:
        lcpp.block_conv = orig


# --------------------------------------------------------------------------- unary transform


def test_logit_transform_is_scale_then_cap():
    """llama.cpp scales, then caps (z-lab, vLLM S4a); vLLM S4b's order differs unless m = 1."""
    logits = 30 * torch.randn(4, 64, generator=_gen(6), dtype=F64)
    m, cap = 0.19611613513818404, 20.0
    got = lcpp.logit_transform(logits, _hp(scale=m, cap=cap))
    assert torch.allclose(got, orc.unary_transform(logits, m, cap, "scale_then_cap"),
                          rtol=0, atol=1e-12)
    assert (got - orc.unary_transform(logits, m, cap, "cap_then_scale")).abs().max() > 1.0
    # a zero scale is "not set" in the graph: only the cap applies
    assert torch.allclose(lcpp.logit_transform(logits, _hp(scale=0.0, cap=cap)),
                          orc.unary_transform(logits, 1.0, cap), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- selector


def _sel_case(seed, K=5, k=4, vocab=40, rank=6, h=10, ties=False):
    """One block of ``K + 1`` rows (row 0 the anchor's); the oracle sees rows 1..K."""
    g = _gen(1000 + seed)
    logits = 3 * torch.randn(K + 1, vocab, generator=g, dtype=F64)
    if ties:
        logits = torch.randint(0, 4, (K + 1, vocab), generator=g).to(F64)
    return dict(prev=torch.randn(vocab, rank, generator=g, dtype=F64),
                next=torch.randn(vocab, rank, generator=g, dtype=F64),
                hid_w=torch.randn(rank, h, generator=g, dtype=F64),
                hidden=torch.randn(K + 1, h, generator=g, dtype=F64), logits=logits,
                anchor=int(torch.randint(vocab, (1,), generator=g)), K=K, k=k, vocab=vocab, h=h)


def _llamacpp_inputs(c, hp):
    t = lcpp.logit_transform(c["logits"], hp)
    scans = [lcpp.top_k_scan(t[i], c["k"]) for i in range(c["K"] + 1)]
    cand = torch.stack([s[0] for s in scans])
    unary = torch.stack([s[1] for s in scans])
    gates = torch.stack([lcpp.gate(c["hid_w"], c["hidden"][i]) for i in range(c["K"] + 1)])
    return cand, unary, gates


def _oracle(c, m=1.0, cap=None):
    """Oracle scores, realized rows and tokens at slots 1..K (section 3's order: top-k of the
    raw logits, unary the transformed logit: the same set, as the transform is monotone)."""
    logits = c["logits"][None, 1:]
    ids, _ = orc.top_candidates(logits, c["k"])
    unary = orc.unary_transform(logits, m, cap, "scale_then_cap").gather(-1, ids)
    s = orc.edge_scores(c["prev"], c["next"], c["hid_w"], c["hidden"][None, 1:], ids, unary,
                        torch.tensor([c["anchor"]]))
    realized, chosen, tokens = orc.walk(s, ids)
    return s[0], realized[0], chosen[0], tokens[0], ids[0]


@pytest.mark.parametrize("seed", SEEDS)
def test_top_k_scan_is_sorted_lower_id_first(seed):
    c = _sel_case(seed, ties=True)
    for i in range(c["K"] + 1):
        ids, vals = lcpp.top_k_scan(c["logits"][i], c["k"])
        want_ids, want_vals = orc.top_candidates(c["logits"][i], c["k"])
        assert torch.equal(ids, want_ids) and torch.equal(vals, want_vals)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("transform", [(None, None), (0.25, 2.0)])
def test_cpu_walk_matches_oracle(seed, transform):
    """build_dflash2_selector_cpu + draft's walk: tokens and score rows are the oracle's."""
    c = _sel_case(seed)
    m, cap = transform
    cand, unary, gates = _llamacpp_inputs(c, _hp(scale=m, cap=cap))
    tokens, rows = lcpp.walk_cpu(cand, unary, gates, c["anchor"], c["prev"], c["next"])
    _, realized, _, want, ids = _oracle(c, 1.0 if m is None else m, cap)
    assert torch.equal(cand[1:], ids)
    assert tokens == want.tolist()
    assert torch.allclose(torch.stack(rows), realized, rtol=0, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_lattice_matches_oracle_scores(seed):
    """The in-graph lattice: row 1 repeats the anchor's row k times, rows i >= 2 are S[i-1]
    at ``p*k + c``; its walk is the oracle's whatever order ggml_top_k leaves (no ties)."""
    c = _sel_case(seed)
    k, n_embd = c["k"], c["k"] * (c["k"] + 1) + 3
    cand, unary, gates = _llamacpp_inputs(c, _hp())
    s, _, _, want, _ = _oracle(c)
    rows = lcpp.lattice(cand, unary, gates, c["anchor"], c["prev"], c["next"], n_embd, c["K"] + 1)
    assert torch.equal(rows[0], torch.zeros(n_embd, dtype=F64))
    for i in range(1, c["K"] + 1):
        assert torch.equal(rows[i, :k].long(), cand[i])
        assert torch.allclose(rows[i, k:k + k * k].reshape(k, k), s[i - 1], rtol=0, atol=1e-10)
        assert torch.equal(rows[i, k + k * k:], torch.zeros(n_embd - k - k * k, dtype=F64))
    assert lcpp.walk_lattice(rows, k) == want.tolist()
    g = _gen(50 + seed)
    perm = torch.stack([torch.randperm(k, generator=g) for _ in range(c["K"] + 1)])
    shuffled = lcpp.lattice(cand.gather(1, perm), unary.gather(1, perm), gates, c["anchor"],
                            c["prev"], c["next"], n_embd, c["K"] + 1)
    assert lcpp.walk_lattice(shuffled, k) == want.tolist()


def test_planted_lattice_layout_fails():
    """Reading the lattice as ``c*k + p`` (predecessor fastest) changes the path."""
    k = 4
    differs = []
    for seed in range(6):
        c = _sel_case(seed)
        cand, unary, gates = _llamacpp_inputs(c, _hp())
        rows = lcpp.lattice(cand, unary, gates, c["anchor"], c["prev"], c["next"], 32, c["K"] + 1)
        swapped = rows.clone()
        swapped[:, k:k + k * k] = rows[:, k:k + k * k].reshape(-1, k, k).transpose(1, 2).reshape(-1, k * k)
        differs.append(lcpp.walk_lattice(swapped, k) != _oracle(c)[3].tolist())
    assert any(differs)


@pytest.mark.parametrize("seed", SEEDS)
def test_p_min_and_n_min_cut_the_oracle_path(seed):
    """llama.cpp only: the walk stops at the first step whose chosen candidate has softmax
    probability (of its score row) below ``p_min``; a draft shorter than ``n_min`` is dropped."""
    c = _sel_case(seed, K=6)
    cand, unary, gates = _llamacpp_inputs(c, _hp())
    _, realized, chosen, want, _ = _oracle(c)
    probs = torch.softmax(realized, -1).gather(-1, chosen[:, None]).squeeze(-1)
    mid = c["K"] // 2
    p_min = float(probs[mid]) + 1e-9
    keep = 0
    while keep < c["K"] and float(probs[keep]) >= p_min:
        keep += 1
    assert keep <= mid
    tokens, _ = lcpp.walk_cpu(cand, unary, gates, c["anchor"], c["prev"], c["next"], p_min=p_min)
    assert tokens == want[:keep].tolist()
    rows = lcpp.lattice(cand, unary, gates, c["anchor"], c["prev"], c["next"], 40, c["K"] + 1)
    assert lcpp.walk_lattice(rows, c["k"], p_min=p_min) == want[:keep].tolist()
    assert lcpp.walk_cpu(cand, unary, gates, c["anchor"], c["prev"], c["next"],
                         n_min=c["K"] + 1)[0] == []


# --------------------------------------------------------------------------- block layout


def test_sample_from_anchor_does_not_reach_dflash2():
    """T2's log line: a GGUF without "dflash.sample_from_anchor" reads true, which only the
    DSpark layout uses; DFlash 2 drafts slots 1..n_max (the oracle's K = B - 1)."""
    n_max, n_min, block, anchor_first = lcpp.clamp_draft(16, 0, {"dflash.block_size": "8"})
    assert (n_max, block, anchor_first) == (7, 8, True)
    for flag in (True, False):
        assert lcpp.noise_block(11, 99, n_max, False, flag) == [11] + [99] * 7
    assert lcpp.noise_block(11, 99, 8, True, True) == [11] + [99] * 7       # DSpark: 8 drafts
    assert lcpp.clamp_draft(16, 0, {"dflash.block_size": "8"}, is_dspark=True)[0] == 8
    assert lcpp.clamp_draft(16, 0, {})[2] == 16                              # absent: 16


# --------------------------------------------------------------------------- z-lab's config


@pytest.fixture(scope="module")
def zlab_config():
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.convert.synth import source_config
    return source_config(load_adapter(ZLAB), "full")


def test_zlab_config_passes_the_loader_checks(zlab_config):
    d = zlab_config["dflash_config"]
    hp = _hp(block_size=d["block_size"], conv_kernel_size=d["conv_kernel_size"],
             conv_group_size=d["conv_group_size"], selector_rank=d["selector_rank"],
             selector_top_k=d["selector_top_k"])
    lcpp.check_dflash2(hp, n_embd=zlab_config["hidden_size"])


def test_zlab_config_draft_needs_scale_and_cap_in_the_gguf(zlab_config):
    """With "dflash.logit_scale" = output_multiplier and "dflash.final_logit_softcapping" set,
    llama.cpp's draft is z-lab's; without them (absent keys) it is the raw-logit draft, which
    differs from z-lab's on this config (m = 0.196, cap = 20)."""
    d = zlab_config["dflash_config"]
    m, cap = d["output_multiplier"], d["final_logit_softcapping"]
    differs = []
    for seed in range(8):
        c = _sel_case(seed, K=6, k=4, vocab=60)
        c["logits"] = 10 * c["logits"]
        cand, unary, gates = _llamacpp_inputs(c, _hp(scale=m, cap=cap))
        carried = lcpp.walk_cpu(cand, unary, gates, c["anchor"], c["prev"], c["next"])[0]
        zlab = _oracle(c, m, cap)[3].tolist()
        assert carried == zlab
        cand, unary, gates = _llamacpp_inputs(c, _hp())
        absent = lcpp.walk_cpu(cand, unary, gates, c["anchor"], c["prev"], c["next"])[0]
        assert absent == _oracle(c)[3].tolist()
        differs.append(absent != zlab)
    assert any(differs)


def test_input_embedding_scale_is_not_applied(zlab_config):
    """llama.cpp feeds raw token embeddings: equal to z-lab only where input_embedding_scale is
    1, as on the published config (absent -> z-lab's default 1)."""
    assert "input_embedding_scale" not in zlab_config["dflash_config"]
    c = conv_case(8, block=4)

    def norm(rows):
        return rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-6)

    def sub(rows):
        return torch.tanh(rows @ c["sub"].T)

    got = lcpp.layer(c["x"], sub, sub, norm, norm, (c["projection"], c["base"]),
                     (c["projection_m"], c["base_m"]), c["nreq"], c["taps"], c["group_size"])
    for scale, equal in ((1.0, True), (2.0, False)):
        want = orc.dflash2_layer(scale * c["x"], sub, sub, norm, norm, (c["projection"], c["base"]),
                                 (c["projection_m"], c["base_m"]), c["block"], c["group_size"])
        assert torch.allclose(got, want, rtol=0, atol=1e-10) is equal
