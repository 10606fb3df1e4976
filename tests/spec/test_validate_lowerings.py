"""ResolvedDrafter.lowering_table: per-layer lowering per device class, and the derived
context-kernel need (the one place lowerings are validated: host, emitted module, CLI)."""

import dataclasses

import pytest

from draftsmith.framework.compile.converted_config import flatten
from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.convert.synth import source_config
from draftsmith.framework.errors import UserError
from draftsmith.lowering.base import LOWERINGS
from support.helpers import minimax, minimax_raw


def flat(head_dim=128, **kw):
    raw = minimax_raw()
    raw["text_config"]["head_dim"] = head_dim
    raw["text_config"]["rotary_dim"] = 32
    raw["text_config"]["layer_types"] = ["sliding_attention", "full_attention", "sliding_attention",
                                         "sliding_attention", "full_attention"]
    return flatten(minimax(), raw)


def resolved(head_dim=128, layer=None, device=None, lowering=None) -> ResolvedDrafter:
    """The drafter of :func:`flat`, with layer ``layer``'s lowering on ``device`` replaced."""
    r = ResolvedDrafter.from_config(flat(head_dim))
    if layer is None:
        return r
    layers = list(r.layers)
    layers[layer] = layers[layer].model_copy(update={"lowering": dict(layers[layer].lowering, **{device: lowering})})
    return r.model_copy(update={"layers": tuple(layers)})


@pytest.mark.parametrize("device,want", [("cpu", "dense"), ("sm90", "triton_window_block"),
                                         ("sm100", "triton_window_block")])
def test_table_per_device(device, want):
    t = resolved().lowering_table(device)
    assert t.lowerings == (want,) * 5 and t.needs_context_kernel is False


@pytest.mark.parametrize("head_dim", [72, 80, 96])
def test_windowed_head_dims_without_context_kernel_accepted(head_dim):
    assert not resolved(head_dim).lowering_table("sm90").needs_context_kernel


def test_adapter_synth_config():
    r = ResolvedDrafter.from_config(flatten(minimax(), source_config(minimax(), "full")))
    assert r.lowering_table("sm90").lowerings == ("triton_window_block",) * 5


def test_unknown_device_class_refused():
    with pytest.raises(UserError, match="device class 'sm80'"):
        resolved().lowering_table("sm80")


@pytest.fixture
def ctx_lowering():
    """A lowering that needs the context kernel (like TensorRT-LLM's own backend would)."""
    info = dataclasses.replace(LOWERINGS["dense"], name="needs_ctx_test", needs_context_kernel=True)
    LOWERINGS[info.name] = info
    yield info.name
    del LOWERINGS[info.name]


def test_context_kernel_need_is_derived_and_checked(ctx_lowering):
    with pytest.raises(UserError, match=r"layer 1 \(full\).*context kernel.*80"):
        resolved(80, 1, "sm90", ctx_lowering).lowering_table("sm90")
    assert resolved(128, 1, "sm90", ctx_lowering).lowering_table("sm90").needs_context_kernel is True


def test_wrong_device_and_head_dim_refused():
    with pytest.raises(UserError, match="layer 0.*trtllm_gen does not run on cpu"):
        resolved(128, 0, "cpu", "trtllm_gen").lowering_table("cpu")
    info = LOWERINGS["triton_window_block"]
    LOWERINGS[info.name] = dataclasses.replace(info, head_dims=(64, 72, 80, 96, 128, 256))
    try:
        with pytest.raises(UserError, match="head dims"):
            resolved(48).lowering_table("sm90")
    finally:
        LOWERINGS[info.name] = info
