"""vLLM 0.33.0's and SGLang 0.5.23's own DFlash 2 code (readers_vllm.dflash2, readers_sglang.dflash2:
their model classes built from the wheels' files, every tensor through their own ``load_weights``) on
every DFlash 2 adapter's tiny checkpoint (the synthesized source, and its export to each DFlash 2
format): what they would run equals draftsmith's record (readers.dflash2_ours) or the difference is
listed in KNOWN; their pure-torch pieces (grouped convolution, a layer's conv placement, edge scores,
candidates through their logits code, SGLang's CPU walk) equal tests/support/oracles_dflash2.py (float64) on
fresh random inputs and the checkpoint's own tensors. vLLM's walk (``_selector_walk_kernel``, Triton)
is not run: Triton's interpreter refuses its scalar masked load. Skipped (one line) without the
wheels' extracted files."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

pytest.importorskip("transformers", reason="the crosscheck extra (transformers==5.19.0) is not installed")

import torch
from safetensors.torch import load_file, save_file

from support import oracles_dflash2 as O
import readers_sglang
import readers_vllm
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.plan import plan
from draftsmith.framework.errors import UserError
from draftsmith.framework.spec.loading import adapter_files
from readers import NotRead, SGLANG, VLLM, differences, dflash2_ours, exported, src_root

F64 = torch.float64
ADAPTERS = sorted(a for a in adapter_files() if load_adapter(a).spec.family == "gqa_dflash2")
#: (source adapter, export target or None for the synthesized source itself): every adapter is a `to=`
CASES = [(a, None) for a in ADAPTERS] + [(a, t) for a in ADAPTERS for t in ADAPTERS]
#: DFlash 2 format -> the SGLang target model kind serving it (readers_sglang.TARGETS; else qwen3)
SGLANG_TARGET = {"minimax_dflash2": "minimax_m3"}
#: what a reader runs that the record does not say, per (reader, source, to): each line explained
KNOWN: dict = {}  # (reader, adapter, to): differences the reader runs knowingly (none today)


def _case_id(case):
    return f"{case[0]}->{case[1] or 'source'}"


def folder_of(checkpoints, source, to):
    """``(folder, record)`` of ``source``'s tiny checkpoint (``to``: its export), or a skip naming
    the export's own refusal."""
    ck = checkpoints(source)
    r = plan(ck.adapter, ck.source).resolved
    if to is None:
        return ck.source, r
    try:
        out, r, _ = exported(checkpoints, source, to)
    except UserError as e:
        pytest.skip(f"the export refuses: {e.args[0].splitlines()[0]}")
    return out, r


_READS: dict = {}


def read(reader, checkpoints, source, to):
    """``(what the reader runs, record, folder)``, each model built once per session."""
    key = (reader, source, to)
    if key not in _READS:
        folder, r = folder_of(checkpoints, source, to)
        if reader == "vLLM":
            theirs = readers_vllm.dflash2(folder, speculative_tokens=r.max_draft_len)
        else:
            theirs = readers_sglang.dflash2(folder, SGLANG_TARGET.get(to or source, "qwen3"))
        _READS[key] = (theirs, r, folder)
    return _READS[key]


def _zlab(checkpoints, reader):
    src_root(VLLM if reader == "vLLM" else SGLANG)
    return read(reader, checkpoints, "zlab_dflash2", "zlab_dflash2")


def _layers_case(checkpoints, reader, seed):
    """The reader's decoder-layer stack, the record, the checkpoint's tensors, a seeded generator
    and two blocks of random rows ``[2 * block, hidden]``."""
    theirs, r, folder = _zlab(checkpoints, reader)
    model = theirs["model"].model if reader == "vLLM" else theirs["model"]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2 * r.block_size, r.dims.hidden, generator=g)
    return model, r, _tensors(folder), g, x


# ---- what each engine would run --------------------------------------------------------------------


#: formats vLLM 0.33.0 registers no model for (model_executor/models/registry.py)
VLLM_UNREGISTERED = {"minimax_dflash2": "MiniMaxDFlash2DraftModel"}


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_vllm_runs_what_the_record_says(checkpoints, case):
    src_root(VLLM)
    arch = VLLM_UNREGISTERED.get(case[1] or case[0])
    if arch:  # also not under EAGLEConfig's DFlash-prefixed name
        with pytest.raises(NotRead, match=rf"registers no draft model {arch} \(nor DFlash{arch}"):
            read("vLLM", checkpoints, *case)
        return
    theirs, r, _ = read("vLLM", checkpoints, *case)
    assert all(p is not None for p in theirs["weights"].values()), theirs["weights"]
    assert differences(theirs, dflash2_ours(r), "vLLM") == KNOWN.get(("vLLM", *case), [])


@pytest.mark.parametrize("case", [c for c in CASES if not c[0].startswith("speculators") and
                                  not (c[1] or "").startswith("speculators")], ids=_case_id)
def test_sglang_runs_what_the_record_says(checkpoints, case):
    """SGLang registers no speculators-format reader (its config has no model_type for
    transformers' AutoConfig): those cases are not SGLang's."""
    src_root(SGLANG)
    theirs, r, _ = read("SGLang", checkpoints, *case)
    assert theirs["arch"] == load_adapter(case[1] or case[0]).spec.match.architectures[0]
    assert all(p is not None for p in theirs["weights"].values()), theirs["weights"]
    assert differences(theirs, dflash2_ours(r), "SGLang") == KNOWN.get(("SGLang", *case), [])


def _planted(tmp_path, folder, edit=None, tensors=None):
    d = tmp_path / "planted"
    shutil.copytree(folder, d, ignore=shutil.ignore_patterns("target"))
    if edit:
        cfg = json.loads((d / "config.json").read_text())
        edit(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    if tensors:
        for f in d.glob("*.safetensors"):
            save_file(tensors(load_file(f)), f)
    return d


PLANTS = {  # name -> (reader, edit of the exported z-lab config, the key the comparison must name)
    "vllm_multiplier": ("vLLM", lambda c: c["dflash_config"].update(output_multiplier=0.5), "unary"),
    "vllm_embedding_scale": ("vLLM", lambda c: c["dflash_config"].update(input_embedding_scale=2.0),
                             "input_embedding_scale"),
    "sglang_softcap": ("SGLang", lambda c: c["dflash_config"].update(final_logit_softcapping=0.0), "unary"),
    "sglang_top_k": ("SGLang", lambda c: c["dflash_config"].update(selector_top_k=3), "selector"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_comparison_notices_a_planted_config(checkpoints, tmp_path, plant):
    reader, edit, key = PLANTS[plant]
    _, r, folder = _zlab(checkpoints, reader)
    d = _planted(tmp_path, folder, edit)
    theirs = readers_vllm.dflash2(d, r.max_draft_len) if reader == "vLLM" else readers_sglang.dflash2(d)
    found = differences(theirs, dflash2_ours(r), reader)
    assert [line.split(":")[1].strip() for line in found] == [key], found


def test_a_dropped_tensor_loads_nothing_but_neither_engine_refuses(checkpoints, tmp_path):
    """Without ``layers.1.mlp_conv.base_kernel`` both loaders finish: vLLM keeps its
    uninitialised ``torch.empty``, SGLang its identity initialisation; the comparison names it."""
    _, r, folder = _zlab(checkpoints, "vLLM")
    d = _planted(tmp_path, folder, tensors=lambda w: {k: v for k, v in w.items()
                                                      if k != "layers.1.mlp_conv.base_kernel"})
    v = readers_vllm.dflash2(d, r.max_draft_len)
    assert v["unloaded"] == ["model.layers.1.mlp_conv.base_kernel"]
    assert differences(v, dflash2_ours(r), "vLLM") == [
        "vLLM: unloaded: runs ['model.layers.1.mlp_conv.base_kernel'], draftsmith's record says []"]
    s = readers_sglang.dflash2(d)
    assert s["unloaded"] == ["layers.1.mlp_conv.base_kernel"]


def test_codebooks_saved_as_module_weights(checkpoints, tmp_path):
    """``candidate_selector.*_codebook.weight`` (the module spelling, which zlab_dflash2 and speculators_dflash2
    accept; minimax_dflash2 does not): vLLM's AutoWeightsLoader refuses it; SGLang's load_weights ignores it, leaving its
    zero codebooks (a selector without pairwise terms)."""
    _, r, folder = _zlab(checkpoints, "SGLang")
    d = _planted(tmp_path, folder, tensors=lambda w: {k + (".weight" if k.endswith("_codebook") else ""): v
                                                      for k, v in w.items()})
    with pytest.raises(ValueError, match=r"Attempted to load nested weight 'candidate_selector\.predecessor_codebook\.weight'"):
        readers_vllm.dflash2(d, r.max_draft_len)
    s = readers_sglang.dflash2(d)
    assert s["unloaded"] == ["candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook"]
    assert s["weights"]["candidate_selector.successor_codebook.weight"] is None
    assert not s["model"].candidate_selector.successor_codebook.any()


# ---- their pure-torch pieces against the float64 oracle ------------------------------------------


def _close(theirs, want, rel=2e-5):
    """Max |theirs - want| within ``rel`` of max |want| (float32 engines vs the float64 oracle)."""
    theirs, want = theirs.to(F64), want.to(F64)
    return float((theirs - want).abs().max()) <= rel * max(float(want.abs().max()), 1e-12)


def _tensors(folder):
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    return out


READERS = ["vLLM", "SGLang"]


@pytest.mark.parametrize("reader", READERS)
def test_grouped_conv_equals_the_oracle(checkpoints, reader):
    """``DFlashGroupedConv.prepare`` / ``finish`` around a random sublayer, two blocks of rows,
    against ``conv_wrap`` on the checkpoint's own tensors with the record's block and grouping;
    a perturbed base kernel fails."""
    model, r, w, g, x = _layers_case(checkpoints, reader, seed=11)
    B, h, gs = r.block_size, r.dims.hidden, r.dflash2.conv.group_size
    M = torch.randn(h, h, generator=g, dtype=F64) / h ** 0.5
    for i, side in [(0, "attention_conv"), (1, "mlp_conv")]:
        conv = getattr(model.layers[i], side)
        with torch.no_grad():
            y, c = conv.prepare(x)
            got = conv.finish((y.to(F64) @ M.T).float(), c)
        proj, base = w[f"layers.{i}.{side}.kernel_projection.weight"], w[f"layers.{i}.{side}.base_kernel"]
        assert _close(got, O.conv_wrap(lambda u: u @ M.T, x, proj, base, B, gs))
        assert not _close(got, O.conv_wrap(lambda u: u @ M.T, x, proj, base.to(F64) + 0.01, B, gs))
        assert not _close(got, O.conv_wrap(lambda u: u @ M.T, x, proj, base, 2 * B, gs))  # block boundary


class _Norm(torch.nn.Module):
    """STUB for the engines' RMSNorm with their fused-add contract (vLLM layers/layernorm.py
    ``RMSNorm.forward_native``, SGLang's ``RMSNorm``): ``norm(x)``, or ``(norm(x + residual), x +
    residual)`` given a residual; unit weight."""

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            return _rms(x), x
        return _rms(x)


def _rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class _Sub(torch.nn.Module):
    """A random row map standing in for attention / MLP (keyword arguments as the engines call them)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x=None, hidden_states=None, **kw):
        u = hidden_states if x is None else x
        return torch.tanh(u.to(F64) @ self.m.T).to(u.dtype)


@pytest.mark.parametrize("reader", READERS)
def test_layer_placement_equals_the_oracle(checkpoints, reader):
    """Both of the drafter's layers (``DFlash2Qwen3DecoderLayer.forward`` / SGLang's
    ``DFlashDecoderLayer.forward``: their norms, attention and MLP replaced by row maps) against
    ``dflash2_layer`` twice: the convolutions wrap each sublayer and the residual is added after
    the output side, across the fused-add norms."""
    model, r, w, g, x = _layers_case(checkpoints, reader, seed=12)
    B, h, gs = r.block_size, r.dims.hidden, r.dflash2.conv.group_size
    ms = [torch.randn(h, h, generator=g, dtype=F64) / h ** 0.5 for _ in range(4)]
    want, hs, res = x.to(F64), x, None
    for i in range(2):
        layer = copy.deepcopy(model.layers[i])
        layer.input_layernorm, layer.post_attention_layernorm = _Norm(), _Norm()
        layer.self_attn, layer.mlp = _Sub(ms[2 * i]), _Sub(ms[2 * i + 1])
        with torch.no_grad():
            if reader == "vLLM":
                hs, res = layer(positions=None, hidden_states=hs, residual=res)
            else:
                hs, res = layer(None, hs, None, res)
        convs = [(w[f"layers.{i}.{s}.kernel_projection.weight"], w[f"layers.{i}.{s}.base_kernel"])
                 for s in ("attention_conv", "mlp_conv")]
        want = O.dflash2_layer(want, _Sub(ms[2 * i]), _Sub(ms[2 * i + 1]), _rms, _rms, *convs, B, gs)
    assert _close(hs + res, want)
    assert not _close(hs, want)  # the residual is the engines' second output


def _selector_inputs(r, seed):
    g = torch.Generator().manual_seed(seed)
    k, V, h, K = r.dflash2.selector.top_k, r.dims.vocab, r.dims.hidden, r.max_draft_len
    ids = torch.stack([torch.randperm(V, generator=g)[:k] for _ in range(2 * K)]).view(2, K, k)
    return ids, torch.randn(2, K, k, generator=g), torch.randn(2, K, h, generator=g), torch.randint(0, V, (2,), generator=g)


def _lattice(reader, theirs, ids, unary, hidden, anchors):
    with torch.no_grad():
        if reader == "vLLM":
            return theirs["model"].model.candidate_selector(ids, unary, hidden, anchors)
        return theirs["model"].candidate_selector.build_lattice(candidate_ids=ids, unary_logits=unary,
                                                                hidden_states=hidden, anchor_token_ids=anchors)


@pytest.mark.parametrize("reader", READERS)
def test_edge_scores_equal_the_oracle(checkpoints, reader):
    """``CandidateSelector`` (vLLM ``forward`` / ``_score_edges``, SGLang ``build_lattice``) against
    ``edge_scores`` on the checkpoint's codebooks and hidden projection; swapped codebooks or
    another request's anchor fail."""
    theirs, r, folder = _zlab(checkpoints, reader)
    w = _tensors(folder)
    ids, unary, hidden, anchors = _selector_inputs(r, 13)
    got = _lattice(reader, theirs, ids, unary, hidden, anchors)
    A, C, W = (w[f"candidate_selector.{n}"] for n in ("predecessor_codebook", "successor_codebook",
                                                        "hidden_projection.weight"))
    assert _close(got, O.edge_scores(A, C, W, hidden, ids, unary, anchors))
    assert not _close(got, O.edge_scores(C, A, W, hidden, ids, unary, anchors))
    assert not _close(got, O.edge_scores(A, C, W, hidden, ids, unary, anchors.flip(0)))


def _candidates(reader, theirs, head, hidden):
    model = theirs["model"]
    with torch.no_grad():
        if reader == "vLLM":
            model.lm_head.weight.data.copy_(head)
        else:  # STUB of the target's lm_head at TP 1 (SGLang's worker attaches the target's head)
            model.lm_head = type("Head", (), {"weight": head.float(), "org_vocab_size": head.shape[0]})()
        return model.compute_candidates(hidden)


#: (reader, source, to) each unary / walk check runs on: the formats each engine serves with a multiplier
#: and cap (speculators_dflash2's record reads neither)
SERVED = [("vLLM", "zlab_dflash2", "zlab_dflash2"), ("SGLang", "zlab_dflash2", "zlab_dflash2"),
          *[("SGLang", "minimax_dflash2", None)] * ("minimax_dflash2" in ADAPTERS)]


@pytest.mark.parametrize("served", SERVED, ids=lambda c: f"{c[0]}-{c[1]}")
def test_candidates_equal_the_oracle(checkpoints, served):
    """``compute_candidates`` (vLLM: ``LogitsProcessor.get_top_k_tokens`` with the multiplier and
    soft cap it read; SGLang: ``candidate_topk`` then ``_transform_unary_logits``) on the verifier's
    head: the record's top-k ids and unary transform in its order; the other order fails."""
    reader = served[0]
    src_root(VLLM if reader == "vLLM" else SGLANG)
    theirs, r, _ = read(reader, checkpoints, *served[1:])
    head = load_file(checkpoints(served[1]).target / "model.safetensors")["lm_head.weight"]
    g = torch.Generator().manual_seed(14)
    hidden = 8 * torch.randn(2 * r.max_draft_len, r.dims.hidden, generator=g)  # logits of tens: the cap bends them
    ids, vals = _candidates(reader, theirs, head.float(), hidden)
    u = r.dflash2.selector.unary
    logits = hidden.to(F64) @ head.float().to(F64).T
    want_ids, _ = O.top_candidates(logits, r.dflash2.selector.top_k)
    assert torch.equal(ids, want_ids)
    assert _close(vals, O.unary_transform(logits, u.multiplier, u.softcap, u.order).gather(-1, want_ids))
    other = {"scale_then_cap": "cap_then_scale", "cap_then_scale": "scale_then_cap"}[u.order]
    assert not _close(vals, O.unary_transform(logits, u.multiplier, u.softcap, other).gather(-1, want_ids))


@pytest.mark.parametrize("served", [c for c in SERVED if c[0] == "SGLang"], ids=lambda c: c[1])
def test_sglang_walk_equals_the_oracle(checkpoints, served):
    """``CandidateSelector.sample_path`` (SGLang's CPU walk) on its own lattice: greedy rows give
    the oracle's greedy path and one-hot q; sampled rows chain through the *sampled* candidate
    (each q row is the softmax of the score row of the candidate it drew before: reference row 3)."""
    src_root(SGLANG)
    theirs, r, _ = read("SGLang", checkpoints, *served[1:])
    assert r.dflash2.selector.chain == "sampled"  # what the sampled rows below show SGLang runs
    sel = theirs["model"].candidate_selector
    ids, unary, hidden, anchors = _selector_inputs(r, 15)
    scores = _lattice("SGLang", theirs, ids, unary * 4, hidden, anchors)
    g = torch.Generator().manual_seed(16)
    uniforms = torch.rand(2, r.max_draft_len, generator=g)
    greedy = torch.tensor([True, True])
    tokens, q = sel.sample_path(candidate_ids=ids, scores=scores, uniforms=uniforms,
                                temperatures=torch.ones(2), greedy_mask=greedy)
    _, chosen, want = O.walk(scores.to(F64), ids)
    assert torch.equal(tokens, want)
    assert torch.equal(q, torch.nn.functional.one_hot(chosen, r.dflash2.selector.top_k).float())
    T = torch.tensor([0.7, 1.3])
    tokens, q = sel.sample_path(candidate_ids=ids, scores=scores, uniforms=uniforms, temperatures=T,
                                greedy_mask=~greedy)
    for b in range(2):
        prev = 0
        for j in range(r.max_draft_len):
            row = torch.softmax(scores[b, j, prev].to(F64) / float(T[b]), -1)
            assert _close(q[b, j], row, 1e-5)
            prev = int((ids[b, j] == tokens[b, j]).nonzero())
    assert not torch.equal(tokens, want)  # these draws leave the greedy path


def test_sglang_minimax_target_refuses_unsorted_taps(checkpoints, tmp_path):
    """SGLang's MiniMax-M3 target (minimax_m3_vl.py ``set_dflash_layers_to_capture``) refuses
    capture taps that are not unique and sorted (draftsmith's spec cannot state that rule: the
    adapter documents it)."""
    if "minimax_dflash2" not in ADAPTERS:
        pytest.skip("no minimax_dflash2 adapter")
    src_root(SGLANG)
    d = _planted(tmp_path, checkpoints("minimax_dflash2").source,
                 lambda c: c["dflash_config"].update(target_layer_ids=[5, 3, 1]))
    with pytest.raises(ValueError, match="^MiniMax DFlash capture taps must be unique and sorted$"):
        readers_sglang.dflash2(d, "minimax_m3")


def test_minimax_accepts_only_the_names_sglang_loads(checkpoints, tmp_path):
    """``model.encoder.fc.weight``: SGLang's load_weights strips ``model.`` but aliases only the
    unprefixed ``encoder.fc.weight``, so it loads nothing into ``fc``; the adapter's plan is
    incomplete for it (refused), while the synthesized names (``encoder.*`` and ``model.``-prefixed)
    load everything in SGLang (test_sglang_runs_what_the_record_says)."""
    if "minimax_dflash2" not in ADAPTERS:
        pytest.skip("no minimax_dflash2 adapter")
    src_root(SGLANG)
    ck = checkpoints("minimax_dflash2")
    d = _planted(tmp_path, ck.source, tensors=lambda w: {("model." + k if k == "encoder.fc.weight" else k): v
                                                         for k, v in w.items()})
    assert readers_sglang.dflash2(d, "minimax_m3")["unloaded"] == ["fc.weight"]
    assert not plan(ck.adapter, d).complete


def test_vllm_speculators_reader_copies_only_the_structural_keys(checkpoints, tmp_path):
    """vLLM's ``update_dflash2`` (transformers_utils/configs/speculators/algos.py) copies
    ``conv_kernel_size``, ``conv_group_size``, ``selector_rank``, ``selector_top_k`` into
    ``dflash_config``, nothing else: a speculators config's multiplier, soft cap and embedding
    scale are not run (speculators_dflash2's record reads none of them either)."""
    src_root(VLLM)
    ck = checkpoints("speculators_dflash2")
    d = _planted(tmp_path, ck.source, lambda c: c.update(output_multiplier=0.5, final_logit_softcapping=30.0,
                                                           input_embedding_scale=2.0, selector_top_k=3))
    v = readers_vllm.dflash2(d)
    assert (v["unary"], v["input_embedding_scale"], v["selector"]) == ((1.0, None), 1.0, (16, 3))
