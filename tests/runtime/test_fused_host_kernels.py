"""Fused host kernels (``framework/runtime/fused.py``) against float64 oracles written here.

``test_interp_*`` run the Triton kernels through the interpreter on CPU (in a child pytest,
see ``interp.py``); ``test_gpu_*`` run them on CUDA and check that the host uses them.
Outputs are poisoned with NaN before each kernel runs (``torch.empty`` is patched).
"""

import math

import pytest
import torch

triton = pytest.importorskip("triton")

from draftsmith.framework.runtime import fused  # noqa: E402
from support.interp import interpreter_suite  # noqa: E402
from support.poison import poison_torch_empty  # noqa: E402

_child_results, interp_test = interpreter_suite(__file__)
HAS_CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    """Every torch.empty during a test returns NaN-filled memory (unwritten -> NaN)."""
    poison_torch_empty(monkeypatch)


# ----------------------------------------------------------------------------- oracles (float64)


def rms_ref(x, w, eps, gemma):
    x = x.double()
    w = w.double() + (1.0 if gemma else 0.0)
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope_ref(x, pos, theta, rot):
    """NeoX rotation of dims 0..rot-1 of ``x [T, H, D]`` (float64) at ``pos [T]``."""
    half = rot // 2
    freq = torch.tensor([theta ** (-2.0 * i / rot) for i in range(half)], dtype=torch.float64)
    ang = pos.double()[:, None] * freq  # [T, half]
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:rot]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, x[..., rot:]], -1), freq


def act_ref(g, u, kind, alpha, limit):
    g, u = g.double(), u.double()
    if kind == "swiglu":
        return g / (1 + torch.exp(-g)) * u
    g = g.clamp(max=limit)
    u = u.clamp(-limit, limit)
    return g / (1 + torch.exp(-alpha * g)) * (u + 1)


def rel_norm(a, b):
    """Frobenius-norm relative error (the fused kernels' tolerance is stated in it)."""
    return ((a.double() - b).norm() / b.norm()).item()


# ----------------------------------------------------------------------------- checks


def check_rms(device, dtype, tol):
    gen = torch.Generator().manual_seed(1)
    for shape, gemma in (((3, 5, 200), True), ((7, 64), False), ((2, 6144), True)):
        x = (torch.randn(*shape, generator=gen) * 3).to(device, dtype)
        w = (0.2 * torch.randn(shape[-1], generator=gen)).to(device, dtype)
        out = fused.rms_norm(x, w, 1e-6, gemma)
        assert out.shape == x.shape and out.dtype == dtype
        assert rel_norm(out.cpu(), rms_ref(x.cpu(), w.cpu(), 1e-6, gemma)) < tol


def check_norm_rope(device, dtype, tol):
    gen = torch.Generator().manual_seed(2)
    for (n, b, h, d, rot, gemma) in ((2, 3, 5, 64, 32, True), (1, 7, 8, 128, 64, False), (2, 2, 3, 80, 80, True)):
        wide = torch.randn(n, b, h * d + 24, generator=gen).to(device, dtype)
        x = wide[..., : h * d].view(n, b, h, d)  # token rows strided, as q of a fused q/k/v output
        w = (0.3 * torch.randn(d, generator=gen)).to(device, dtype)
        pos = torch.randint(0, 300_000, (n, b), generator=gen)
        theta = 5e6
        freq = torch.tensor([theta ** (-2.0 * i / rot) for i in range(rot // 2)], dtype=torch.float64)
        out = fused.norm_rope(x, w, 1e-6, gemma, pos.to(device), freq.to(device), rot)
        assert out.shape == x.shape and out.dtype == dtype
        normed = rms_ref(x.cpu(), w.cpu(), 1e-6, gemma).reshape(-1, h, d)
        ref, _ = rope_ref(normed, pos.reshape(-1), theta, rot)
        assert rel_norm(out.cpu().reshape(-1, h, d), ref) < tol


def check_act(device, dtype, tol):
    gen = torch.Generator().manual_seed(3)
    for kind in ("swiglu", "swiglu_oai"):
        gu = (torch.randn(5, 3, 2 * 700, generator=gen) * 5).to(device, dtype)
        g, u = gu[..., :700], gu[..., 700:]  # strided rows, as from a fused gate/up output
        out = fused.gated_act(g, u, kind, 1.702, 7.0)
        assert out.shape == g.shape and out.dtype == dtype
        assert rel_norm(out.cpu(), act_ref(g.cpu(), u.cpu(), kind, 1.702, 7.0)) < tol


def check_bias_argmax(device, dtype, tol):
    """Rows over several vocab blocks (V not a multiple of the block), a planted tie (the
    first index must win) and a maximum in the last, partial block; with and without bias."""
    gen = torch.Generator().manual_seed(5)
    n, v = 6, 10_007
    lm = torch.randn(n, v, generator=gen).to(dtype)
    bias = torch.randn(n, v, generator=gen).to(dtype)
    lm[1, 9000] = lm[1, 17] = 40.0  # tie across blocks, no bias: index 17
    lm[2, 10_006] = 50.0  # in the last block
    for b in (None, bias):
        want = lm.double() + (0 if b is None else b.double())
        if b is None:
            assert want[1].argmax().item() == 17
        out = torch.full((n, v), float("nan"), dtype=torch.float32, device=device)
        idx = fused.bias_argmax(lm.to(device), None if b is None else b.to(device), out)
        assert idx.dtype == torch.int64 and idx.shape == (n,)
        assert (out.cpu().double() - want).abs().max().item() < 1e-5 * want.abs().max().item()
        # expected index: the first column holding the row's maximum, found without argmax
        first = [int(((want[r] == want[r].max()).nonzero())[0]) for r in range(n)]
        assert idx.cpu().tolist() == first


CHECKS = {"rms": check_rms, "norm_rope": check_norm_rope, "act": check_act, "bias_argmax": check_bias_argmax}


@pytest.mark.parametrize("what", list(CHECKS))
@interp_test
def test_interp_fused_float32(what):
    CHECKS[what]("cpu", torch.float32, 1e-6)


@pytest.mark.parametrize("what", list(CHECKS))
@interp_test
def test_interp_fused_bfloat16(what):
    CHECKS[what]("cpu", torch.bfloat16, 8e-3)


def test_disabled_on_cpu_and_by_env(monkeypatch):
    x = torch.ones(2)
    assert not fused.enabled(x)
    if HAS_CUDA:
        assert fused.enabled(x.cuda())
        monkeypatch.setenv("DRAFTSMITH_FUSED", "0")
        assert not fused.enabled(x.cuda())


gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("what", list(CHECKS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_fused(what, dtype):
    CHECKS[what]("cuda", dtype, 1e-5 if dtype == torch.float32 else 8e-3)


@pytest.mark.gpu
@gpu
def test_gpu_fused_equals_eager_modules(monkeypatch):
    """The host's modules give the same bf16 values fused (CUDA) as eager (DRAFTSMITH_FUSED=0)."""
    from draftsmith.framework.runtime.modules import GatedMLP, RMSNorm

    gen = torch.Generator().manual_seed(4)
    norm = RMSNorm(512, 1e-6, True).cuda().to(torch.bfloat16)
    norm.weight.data.copy_(0.1 * torch.randn(512, generator=gen))
    mlp = GatedMLP(512, 1024, "swiglu_oai", 1.702, 7.0).cuda().to(torch.bfloat16)
    mlp.stack_weights()  # gate and up as one GEMM
    for lin in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        lin.weight.data.copy_(torch.randn(lin.weight.shape, generator=gen) * 512 ** -0.5)
    x = torch.randn(4, 7, 512, generator=gen).cuda().to(torch.bfloat16)
    with torch.no_grad():
        got = (norm(x), mlp(x))
        monkeypatch.setenv("DRAFTSMITH_FUSED", "0")
        want = (norm(x), mlp(x))
    for a, b in zip(got, want):
        assert rel_norm(a.float(), b.double()) < 4e-3


def test_stacked_projection_weights(monkeypatch):
    """q/k/v (and gate/up) weights are row blocks of one tensor after loading; the one-GEMM
    projection equals the separate ones; a dtype change un-stacks them (separate GEMMs)."""
    from draftsmith.framework.runtime import layers as layers_mod
    from draftsmith.framework.runtime.layers import DFlashAttention, LayerShape
    from draftsmith.framework.runtime.modules import GatedMLP, PartialNeoxRope, stacked_weight

    s = LayerShape(hidden=48, heads=4, kv_heads=2, head_dim=16, rotary_dim=8, rope_theta=1e4, eps=1e-6,
                   inter=40, mlp="swiglu", alpha=1.0, limit=7.0)
    gen = torch.Generator().manual_seed(6)
    attn = DFlashAttention(s, False, False, PartialNeoxRope(16, 8, 1e4))
    attn.stack_weights()
    with torch.no_grad():
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj):
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen))
    assert stacked_weight(attn.qkv, attn.q_proj, attn.k_proj, attn.v_proj) is attn.qkv
    assert torch.equal(attn.qkv[64:96], attn.k_proj.weight)
    y = torch.randn(2, 3, 48, generator=gen)
    monkeypatch.setattr(layers_mod.fused, "enabled", lambda x: True)  # the stacked path on CPU
    q, k, v = attn.project(y)
    _, k2, v2 = attn.project(y, with_q=False)
    with torch.no_grad():
        for got, lin in ((q, attn.q_proj), (k, attn.k_proj), (v, attn.v_proj), (k2, attn.k_proj), (v2, attn.v_proj)):
            want = y.double() @ lin.weight.double().T
            assert (got.double() - want).abs().max().item() < 1e-4
    attn.double()
    assert stacked_weight(attn.qkv, attn.q_proj, attn.k_proj, attn.v_proj) is None
    q3, _, _ = attn.project(y.double())  # falls back to separate GEMMs, still right
    assert (q3 - y.double() @ attn.q_proj.weight.T).abs().max().item() < 1e-10
    mlp = GatedMLP(48, 40, "swiglu", 0.0, 0.0)
    mlp.stack_weights()
    assert stacked_weight(mlp.gate_up, mlp.gate_proj, mlp.up_proj) is mlp.gate_up
    assert stacked_weight(mlp.gate_up, mlp.up_proj, mlp.gate_proj) is None  # order matters
