"""The emitted package inside the conformance suite's ``tensorrt_llm`` shim (TensorRT-LLM's own
excerpts, transcriptions for the rest; tests/emit/test_emit_trtllm_fake.py): import, registration, the
generated backbone per rank, fused weight loading, tied embeddings, the block decode against a float64
oracle, buffer reuse, and the refusal of a native registration. Issue 34 fixes 1, 3, 5, 8, 9; issue 35
items 1-2 in one process (across processes: tests/upstream/trtllm/test_trtllm_p17_tensor_parallel.py)."""

from __future__ import annotations

import importlib
import math
import sys
from types import SimpleNamespace

import pytest
import torch

from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.emit.render import EngineNames, write_package
from support.oracles import oracle
from support.trtllm_shim import fake_trtllm  # noqa: F401  (fixture)
from support.host_case import BLOCK, D, HID, HKV, HQ, INTER, LAYERS, make_config

ARCH = "TinyDraftModel"


def tiny_config(**extra):
    """test_host.make_config's converted config under this test's architecture."""
    return dict(make_config(), architectures=[ARCH], model_type="tiny_draft", **extra)


class FakeAdapter:
    """The part of a compiled adapter ``write_package`` reads; the config is already converted."""

    def __init__(self, config, name="test", architectures=(ARCH,)):
        self.name, self.architectures = name, list(architectures)
        self.spec = SimpleNamespace(synth=SimpleNamespace(config=config), docs=SimpleNamespace(serving={}))


def emit_package(tmp_path, config, package="draftsmith_tiny_runtime"):
    spec_file = tmp_path / "test.yaml"
    spec_file.write_text("name: test\n")
    return write_package(FakeAdapter(config), spec_file, tmp_path / "out", EngineNames(), package=package)


@pytest.fixture
def imported(tmp_path, fake_trtllm, monkeypatch):  # noqa: F811
    """``(package module, config, fake handles)`` for the tiny DSpark drafter."""
    config = tiny_config()
    res = emit_package(tmp_path, config)
    monkeypatch.syspath_prepend(str(res.package_dir.parent))
    for name in [n for n in sys.modules if n.startswith(res.package)]:
        monkeypatch.delitem(sys.modules, name)
    pkg = importlib.import_module(res.package)
    yield pkg, config, fake_trtllm
    for name in [n for n in sys.modules if n.startswith(res.package)]:
        del sys.modules[name]


def bag(config):
    """The drafter config as TensorRT-LLM hands it (an attribute bag with to_dict)."""
    ns = SimpleNamespace(**config)
    ns.to_dict = lambda: dict(config)
    return ns


def build_drafter(ns, config, mapping=None, backend="VANILLA"):
    mapping = mapping or ns.Mapping()
    spec = SimpleNamespace(attention_backend=backend, draft_is_embedded_in_target=False)
    target_cfg = ns.ModelConfig(pretrained_config=None, spec_config=spec, mapping=mapping)
    draft_cfg = ns.ModelConfig(pretrained_config=bag(config), spec_config=spec, mapping=mapping)
    builder = ns.BUILDERS[ns.Mode.DSPARK]
    return builder(target_cfg, draft_cfg, None, None)


def random_weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = {}
    for i in range(len(LAYERS)):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", (HQ * D, HID)), ("self_attn.k_proj", (HKV * D, HID)),
                            ("self_attn.v_proj", (HKV * D, HID)), ("self_attn.o_proj", (HID, HQ * D)),
                            ("mlp.gate_proj", (INTER, HID)), ("mlp.up_proj", (INTER, HID)),
                            ("mlp.down_proj", (HID, INTER))):
            w[p + name + ".weight"] = torch.randn(*shape, generator=g) / math.sqrt(shape[1])
        for name, size in (("input_layernorm", HID), ("post_attention_layernorm", HID),
                           ("self_attn.q_norm", D), ("self_attn.k_norm", D)):
            w[p + name + ".weight"] = 0.1 * torch.randn(size, generator=g)
    w["model.norm.weight"] = 0.1 * torch.randn(HID, generator=g)
    return w


# ----------------------------------------------------------------------------- import / registration


def test_import_registers_backbone_and_builder_and_the_builder_defers_others(imported):
    pkg, config, ns = imported
    assert ns.MODEL_CLASS_MAPPING[ARCH].__name__ == "DraftsmithBackbone"
    assert ns.MODEL_CLASS_MAPPING[ARCH].__module__ == pkg.__name__ + ".drafter"  # handed to workers by module
    assert pkg.MAX_DRAFT_LEN == BLOCK and pkg.ARCHITECTURE == ARCH
    model = build_drafter(ns, config)
    assert isinstance(model, ns.ds["GQADSparkForCausalLM"]) and type(model).__name__ == "DraftsmithDrafter"
    other = dict(config, architectures=["SomethingElse"])
    other.pop("draftsmith")
    with pytest.raises(RuntimeError, match="Unknown model architecture"):  # TensorRT-LLM's own builder got it
        build_drafter(ns, other)


def test_native_registration_is_refused_in_one_line(tmp_path, fake_trtllm, monkeypatch):  # noqa: F811
    ns = fake_trtllm
    res = emit_package(tmp_path, tiny_config(), package="draftsmith_tiny_native")
    native = type("MiniMaxDSparkForCausalLM", (), {"__module__": "tensorrt_llm._torch.models.modeling_minimaxm3"})
    ns.MODEL_CLASS_MAPPING[ARCH] = native
    monkeypatch.syspath_prepend(str(res.package_dir.parent))
    with pytest.raises(ImportError) as e:
        importlib.import_module(res.package)
    assert "natively" in str(e.value) and "\n" not in str(e.value)
    assert ns.MODEL_CLASS_MAPPING[ARCH] is native and ns.Mode.DSPARK in ns.BUILDERS
    assert ns.BUILDERS[ns.Mode.DSPARK] is ns.ds["_build_dspark_draft"]  # TensorRT-LLM's own, untouched
    for name in [n for n in sys.modules if n.startswith(res.package)]:
        del sys.modules[name]


# ----------------------------------------------------------------------------- backbone per rank


@pytest.mark.parametrize("tp,adp", [(1, False), (2, False), (4, False), (2, True), (4, True)])
def test_backbone_shards_per_rank_with_fused_modes(imported, tp, adp):
    """Heads / KV heads per rank as Attention.__init__ computes them (KV duplicated at tp 4 > 2
    KV heads), COLUMN qkv/gate_up with the fused weight modes, ROW o/down, the unsharded layout
    under attention DP; q/k/v and gate/up load through the excerpt's fused branch."""
    pkg, config, ns = imported
    weights = random_weights()
    for rank in range(tp):
        mapping = ns.Mapping(world_size=tp, rank=rank, tp_size=tp, enable_attention_dp=adp)
        model = build_drafter(ns, config, mapping)
        t = 1 if adp else tp
        a = model.model.layers[0].self_attn
        nkv = -(-HKV // t)
        assert (a.num_heads, a.num_key_value_heads, a.q_size, a.kv_size) == (HQ // t, nkv, HQ // t * D, nkv * D)
        assert a.qkv_proj.weights_loading_config.weight_mode == ns.WeightMode.FUSED_QKV_LINEAR
        assert a.qkv_proj.tp_mode == ns.TP.COLUMN and a.o_proj.tp_mode == ns.TP.ROW
        assert tuple(a.qkv_proj.weight.shape) == ((HQ // t + 2 * nkv) * D, HID)
        assert tuple(a.o_proj.weight.shape) == (HID, HQ // t * D)
        mlp = model.model.layers[0].mlp
        assert mlp.gate_up_proj.weights_loading_config.weight_mode == ns.WeightMode.FUSED_GATE_UP_LINEAR
        assert tuple(mlp.gate_up_proj.weight.shape) == (2 * INTER // t, HID)
        assert tuple(mlp.down_proj.weight.shape) == (HID, INTER // t) and mlp.down_proj.tp_mode == ns.TP.ROW
        emb = model.model.embed_tokens
        assert emb.tp_mode == (None if adp else ns.TP.COLUMN) and emb.tp_size == t
        model.draft_model_full.load_weights(weights, allow_partial_loading=True)
        r = rank % t
        q = weights["model.layers.0.self_attn.q_proj.weight"].view(HQ, D, HID)[r * HQ // t:(r + 1) * HQ // t]
        kv_head = (r * HKV) // t if t > HKV else None
        k_all = weights["model.layers.0.self_attn.k_proj.weight"].view(HKV, D, HID)
        k = k_all[kv_head:kv_head + 1] if kv_head is not None else k_all[r * nkv:(r + 1) * nkv]
        got = a.qkv_proj.weight.view(-1, D, HID)
        assert torch.equal(got[:HQ // t], q) and torch.equal(got[HQ // t:HQ // t + nkv], k)
        g = weights["model.layers.0.mlp.gate_proj.weight"][r * INTER // t:(r + 1) * INTER // t]
        assert torch.equal(mlp.gate_up_proj.weight[:INTER // t], g)


@pytest.mark.parametrize("tp,adp", [(1, False), (2, False), (2, True)])
def test_tied_embeddings_pass_the_tie_block(tmp_path, fake_trtllm, monkeypatch, tp, adp):  # noqa: F811
    """DecoderModelForCausalLM.__init__'s tie block (excerpt) asserts lm_head and embed_tokens
    share TP size and mode: the embedding is built as TensorRT-LLM's backbones build it."""
    ns = fake_trtllm
    config = tiny_config(tie_word_embeddings=True)
    res = emit_package(tmp_path, config, package=f"draftsmith_tiny_tied_{tp}_{int(adp)}")
    monkeypatch.syspath_prepend(str(res.package_dir.parent))
    importlib.import_module(res.package)
    model = build_drafter(ns, config, ns.Mapping(world_size=tp, rank=tp - 1, tp_size=tp, enable_attention_dp=adp))
    assert model.draft_model_full.lm_head.weight is model.model.embed_tokens.weight
    for name in [n for n in sys.modules if n.startswith(res.package)]:
        del sys.modules[name]


# ----------------------------------------------------------------------------- the block decode


def rms(x, w, gemma, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * ((1 + w) if gemma else w)


def rope64(x, pos, rot, theta):
    inv = 1.0 / theta ** (torch.arange(0, rot // 2, dtype=torch.float64) * 2 / rot)
    f = pos.double()[..., None] * inv
    cos, sin = f.cos()[:, :, None, :], f.sin()[:, :, None, :]
    x1, x2 = x[..., :rot // 2], x[..., rot // 2:rot]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., rot:]], -1)


def oracle_block_decode(r: ResolvedDrafter, w, noise, pos, ctx_k, ctx_v):
    """float64, drafter reference section 1 step 3 (block part): ctx_k/ctx_v[layer][n] the
    context K/V (already normed and roped); a bias added where ``w`` has one, q/k normed only
    where ``w`` has their norms."""
    b, blk = noise.shape[:2]
    x = noise.double().reshape(b * blk, -1)
    eps = r.rms_norm_eps
    for i, layer in enumerate(r.layers):
        p = f"model.layers.{i}."
        W = {k[len(p):]: t.double() for k, t in w.items() if k.startswith(p)}

        def lin(h, name):
            out = h @ W[name + ".weight"].T
            return out + W[name + ".bias"] if name + ".bias" in W else out

        y = rms(x, W["input_layernorm.weight"], r.norms["input_layernorm"] == "gemma", eps)
        q = lin(y, "self_attn.q_proj").view(b, blk, HQ, D)
        k = lin(y, "self_attn.k_proj").view(b, blk, HKV, D)
        v = lin(y, "self_attn.v_proj").view(b, blk, HKV, D)
        if "self_attn.q_norm.weight" in W:
            q = rms(q, W["self_attn.q_norm.weight"], r.norms["q_norm"] == "gemma", eps)
            k = rms(k, W["self_attn.k_norm.weight"], r.norms["k_norm"] == "gemma", eps)
        q, k = rope64(q, pos, r.dims.rotary_dim, r.rope.theta), rope64(k, pos, r.dims.rotary_dim, r.rope.theta)
        m = layer.mask
        att, _ = oracle(q, [c.double() for c in ctx_k[i]], [c.double() for c in ctx_v[i]], k, v, m.causal, m.window,
                        D ** -0.5)
        x = x + lin(att.reshape(b * blk, -1), "self_attn.o_proj")
        h = rms(x, W["post_attention_layernorm.weight"], r.norms["post_attention_layernorm"] == "gemma", eps)
        gate, up = lin(h, "mlp.gate_proj"), lin(h, "mlp.up_proj")
        if r.mlp.kind == "swiglu_oai":
            gg, u = gate.clamp(max=r.mlp.limit), up.clamp(-r.mlp.limit, r.mlp.limit)
            act = gg * torch.sigmoid(r.mlp.alpha * gg) * (u + 1)
        else:
            act = torch.nn.functional.silu(gate) * up
        x = x + lin(act, "mlp.down_proj")
    return rms(x, w["model.norm.weight"].double(), r.norms["norm"] == "gemma", eps)


def decode_inputs(seed=1, capacity=29):
    g = torch.Generator().manual_seed(seed)
    b, blk, L = 2, BLOCK, len(LAYERS)
    ctx = torch.tensor([9, capacity - blk])
    slots = torch.tensor([2, 0])  # arena slots; 1 is unused, 3 scratch
    kc = torch.randn(4, L, capacity, HKV, D, generator=g)
    vc = torch.randn(4, L, capacity, HKV, D, generator=g)
    noise = torch.randn(b, blk, HID, generator=g)
    pos = (ctx[:, None] + torch.arange(blk)[None]).reshape(-1)
    return noise, pos, ctx, kc, vc, slots


def test_block_decode_matches_the_float64_oracle_on_the_vanilla_arena(imported):
    """Fails on the old forward (``model._rope``: not a method of the pinned class)."""
    pkg, config, ns = imported
    model = build_drafter(ns, config)
    assert not hasattr(model, "_rope")
    w = random_weights()
    model.draft_model_full.load_weights(w, allow_partial_loading=True)
    noise, pos, ctx, kc, vc, slots = decode_inputs()
    ctx_k = [[kc[s, i, :c].clone() for s, c in zip(slots, ctx)] for i in range(len(LAYERS))]
    ctx_v = [[vc[s, i, :c].clone() for s, c in zip(slots, ctx)] for i in range(len(LAYERS))]
    out = model.dflash_forward(noise, pos, ctx, kc, vc, slots)
    want = oracle_block_decode(ResolvedDrafter.from_config(config), w, noise, pos.view(2, BLOCK), ctx_k, ctx_v)
    torch.testing.assert_close(out.double(), want, atol=1e-4, rtol=1e-4)


def test_the_forward_reuses_its_buffers_after_the_first_call(imported, monkeypatch):
    """Issue 34 fix 8 (CPU side): the second call builds no buffer (no factory call in the forward
    module, the same buffer storage) and the lowering list is resolved once."""
    import draftsmith.framework.emit.forward as fwd

    pkg, config, ns = imported
    model = build_drafter(ns, config)
    model.draft_model_full.load_weights(random_weights(), allow_partial_loading=True)
    noise, pos, ctx, kc, vc, slots = decode_inputs()
    first = model.dflash_forward(noise, pos, ctx, kc.clone(), vc.clone(), slots)
    decode = vars(model)["_draftsmith_decode"]
    ptrs = {k: v.data_ptr() for k, v in decode.buffers.items() if isinstance(v, torch.Tensor)}
    calls = []

    class Counting:
        def __getattr__(self, name):
            attr = getattr(torch, name)
            if name in ("arange", "zeros", "ones", "empty", "full", "tensor", "zeros_like", "empty_like", "outer"):
                def counted(*a, **k):
                    calls.append(name)
                    return attr(*a, **k)
                return counted
            return attr

    monkeypatch.setattr(fwd, "torch", Counting())
    second = model.dflash_forward(noise, pos, ctx, kc.clone(), vc.clone(), slots)
    assert calls == [] and vars(model)["_draftsmith_decode"] is decode
    assert {k: v.data_ptr() for k, v in decode.buffers.items() if isinstance(v, torch.Tensor)} == ptrs
    torch.testing.assert_close(first, second)
    third = model.dflash_forward(noise[:1], pos[:BLOCK], ctx[:1], kc.clone(), vc.clone(), slots[:1])  # fewer rows
    assert calls == [] and {k: v.data_ptr() for k, v in decode.buffers.items() if isinstance(v, torch.Tensor)} == ptrs
    torch.testing.assert_close(third, first[:BLOCK])


@pytest.mark.parametrize("to", [torch.float64, "meta"], ids=["float64", "meta"])
def test_loading_keeps_the_device_and_dtype_the_drafter_was_moved_to(imported, to):
    """TensorRT-LLM moves the built drafter (``.cuda()``) and then loads it: every parameter and buffer
    stays on the device and dtype it was moved to (the CPU mirror of the CUDA-graph test, which a
    loader that swaps in the checkpoint's CPU float32 tensor fails on a GPU), and the values loaded
    are the checkpoint's."""
    pkg, config, ns = imported
    model = build_drafter(ns, config).to(to)
    device, dtype = (torch.device("meta"), torch.float32) if to == "meta" else (torch.device("cpu"), to)
    w = random_weights()
    model.draft_model_full.load_weights(w, allow_partial_loading=True)
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    assert any(n.endswith("norm.weight") for n in tensors)
    off = {n: (t.device, t.dtype) for n, t in tensors.items() if (t.device, t.dtype) != (device, dtype)}
    assert not off, f"not on {device}/{dtype} after loading: {off}"
    if to == "meta":
        return
    params = dict(model.draft_model_full.named_parameters())
    same = [k for k in w if k in params]  # norms, o_proj, down_proj (q/k/v and gate/up are fused)
    assert {k for k in w if k.endswith("norm.weight")} <= set(same)
    for k in same:
        torch.testing.assert_close(params[k], w[k].to(dtype), atol=0, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_forward_captures_in_a_cuda_graph_and_replays_with_padded_rows(imported):
    """Issue 34 fix 8: capture after one eager call; replay with other values and the padded row
    (TensorRT-LLM maps padding to the scratch slot) equals eager."""
    pkg, config, ns = imported
    model = build_drafter(ns, config).cuda()
    model.draft_model_full.load_weights(random_weights(), allow_partial_loading=True)
    noise, pos, ctx, kc, vc, slots = (t.cuda() for t in decode_inputs(capacity=160))
    pad = lambda t, v: torch.cat([t, t[:1] * 0 + v])  # noqa: E731  a third, padded row
    s_noise, s_pos = torch.cat([noise, noise[:1]]), torch.cat([pos, pos[:BLOCK] * 0 + torch.arange(BLOCK, device="cuda")])
    s_ctx, s_slots = pad(ctx, 0), pad(slots, 3)
    kc0, vc0 = kc.clone(), vc.clone()
    model.dflash_forward(s_noise, s_pos, s_ctx, kc, vc, s_slots)  # warm-up: buffers built here
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model.dflash_forward(s_noise, s_pos, s_ctx, kc, vc, s_slots)
    g = torch.Generator(device="cuda").manual_seed(5)
    s_noise.copy_(torch.randn(s_noise.shape, generator=g, device="cuda"))
    kc.copy_(kc0), vc.copy_(vc0)
    graph.replay()
    got = static_out.clone()
    kc.copy_(kc0), vc.copy_(vc0)
    want = model.dflash_forward(s_noise, s_pos, s_ctx, kc, vc, s_slots)
    torch.testing.assert_close(got[:2 * BLOCK], want[:2 * BLOCK], atol=2e-3, rtol=2e-3)


def test_block_decode_reads_the_paged_pool_as_the_dense_arena(imported):
    """The same context in TensorRT-LLM's paged HND pool (TRTLLM/FA4/XQA: ``[L, pages, 2, nkv, P,
    hd]``, rows of ``ctx_page_table`` picked by ``ctx_cache_batch_idx``) gives the same block decode."""
    pkg, config, ns = imported
    model = build_drafter(ns, config)
    model.draft_model_full.load_weights(random_weights(), allow_partial_loading=True)
    noise, pos, ctx, kc, vc, slots = decode_inputs()
    want = model.dflash_forward(noise, pos, ctx, kc.clone(), vc.clone(), slots)
    P, L, cap = 8, len(LAYERS), kc.shape[2]
    per_slot = -(-cap // P)
    g = torch.Generator().manual_seed(9)
    order = torch.randperm(kc.shape[0] * per_slot, generator=g)  # pages in any order
    page_table = order.view(kc.shape[0], per_slot).to(torch.int32)
    pool = torch.full((L, kc.shape[0] * per_slot, 2, HKV, P, D), float("nan"))
    for s in range(kc.shape[0]):
        for t in range(cap):
            pg, sl = int(page_table[s, t // P]), t % P
            pool[:, pg, 0, :, sl] = kc[s, :, t]
            pool[:, pg, 1, :, sl] = vc[s, :, t]
    got = model.dflash_forward(noise, pos, ctx, None, None, slots, ctx_kv_cache=pool, ctx_page_table=page_table)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
