"""Every transform: forward(inverse(y)) == y, bit for bit, on values from its image."""

import pytest
import torch

from draftsmith.transforms.base import TRANSFORMS, Binding, Context, TensorMeta, get_transform

CTX = Context({"torch_dtype": "bfloat16", "num_key_value_heads": 2, "head_dim": 8, "num_attention_heads": 4})


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def roundtrip(t, b, y):
    src = t.inverse(b, y, CTX)
    metas = {r: TensorMeta(tuple(src[n].shape), src[n].dtype) for r, n in b.inputs.items()}
    out_metas = t.meta(b, metas, CTX)
    got = t.forward(b, {r: src[n] for r, n in b.inputs.items()}, CTX)
    for n, v in y.items():
        assert out_metas[n] == TensorMeta(tuple(v.shape), v.dtype)
        assert torch.equal(bits(got[n]), bits(v)), n


@pytest.mark.parametrize("seed", [0, 1])
def test_dequant_mxfp8(seed):
    gen = torch.Generator().manual_seed(seed)
    t = get_transform("dequant_mxfp8")(get_transform("dequant_mxfp8").Params(), r"\.weight$")
    b = t.bind_inverse("a.weight", {"a.weight"})
    y = t.sample(b, {"a.weight": TensorMeta((6, 96), torch.bfloat16)}, gen, CTX)
    roundtrip(t, b, y)


@pytest.mark.parametrize("mode", ["fold", "keep"])
def test_norm_fold(mode):
    gen = torch.Generator().manual_seed(3)
    cls = get_transform("norm_fold_gemma")
    t = cls(cls.Params(mode=mode), r"norm")
    b = t.bind_inverse("x.norm.weight", set())
    y = t.sample(b, {"x.norm.weight": TensorMeta((64,), torch.bfloat16)}, gen, CTX)
    roundtrip(t, b, y)


def test_norm_fold_is_one_plus_w_rounded_once():
    cls = get_transform("norm_fold_gemma")
    t = cls(cls.Params(mode="fold"), r".*")
    w = (torch.randn(256, generator=torch.Generator().manual_seed(4)) * 0.3).to(torch.bfloat16)
    got = t.forward(Binding({"x": "n"}, ("n",)), {"x": w}, CTX)["n"]
    want = torch.tensor([1.0 + float(v) for v in w.double()], dtype=torch.float64).to(torch.bfloat16)
    assert torch.equal(got, want)


def test_cast():
    cls = get_transform("cast")
    t = cls(cls.Params(dtype="bfloat16", synth_dtype="float32"), r".*")
    b = t.bind_inverse("w", set())
    y = {"w": torch.randn(5, 7, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)}
    roundtrip(t, b, y)


def test_fuse_and_split_are_inverses():
    gen = torch.Generator().manual_seed(6)
    split = get_transform("split")(get_transform("split").Params(
        input="{l*}.qkv_proj.weight",
        outputs=["{l*}.q_proj.weight", "{l*}.k_proj.weight", "{l*}.v_proj.weight"],
        sizes=[["num_attention_heads", "head_dim"], ["num_key_value_heads", "head_dim"], ["num_key_value_heads", "head_dim"]],
    ), ".*")
    names = {"layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight"}
    b = split.bind_inverse("layers.0.self_attn.q_proj.weight", names)
    assert b.inputs == {"x0": "layers.0.self_attn.qkv_proj.weight"}
    y = {"layers.0.self_attn.q_proj.weight": torch.randn(32, 16, generator=gen).to(torch.bfloat16),
         "layers.0.self_attn.k_proj.weight": torch.randn(16, 16, generator=gen).to(torch.bfloat16),
         "layers.0.self_attn.v_proj.weight": torch.randn(16, 16, generator=gen).to(torch.bfloat16)}
    roundtrip(split, b, y)

    fuse = get_transform("fuse")(get_transform("fuse").Params(
        inputs=["{l*}.q_proj.weight", "{l*}.k_proj.weight", "{l*}.v_proj.weight"], output="{l*}.qkv_proj.weight",
        sizes=[["num_attention_heads", "head_dim"], ["num_key_value_heads", "head_dim"], ["num_key_value_heads", "head_dim"]],
    ), ".*")
    b2 = fuse.bind_inverse("layers.0.self_attn.qkv_proj.weight", set())
    fused = torch.cat(list(y.values()))
    roundtrip(fuse, b2, {"layers.0.self_attn.qkv_proj.weight": fused})
    # fuse's own forward is torch.cat in declared order
    assert torch.equal(fuse.forward(b2, {f"part{k}": v for k, v in enumerate(y.values())}, CTX)[
        "layers.0.self_attn.qkv_proj.weight"], fused)


def test_every_registered_transform_is_covered():
    assert set(TRANSFORMS) >= {"dequant_mxfp8", "norm_fold_gemma", "cast", "fuse", "split"}
