"""validate_lowerings: per-layer lowering per device class, and the derived context-kernel need."""

import dataclasses

import pytest

from draftsmith.framework.errors import UserError
from draftsmith.framework.compile.lowerings import validate_lowerings
from draftsmith.lowering.base import LOWERINGS, LoweringInfo
from helpers import minimax, minimax_raw


def flat(head_dim=128, **kw):
    raw = minimax_raw()
    raw["text_config"]["head_dim"] = head_dim
    raw["text_config"]["rotary_dim"] = 32
    raw["text_config"]["layer_types"] = ["sliding_attention", "full_attention", "sliding_attention",
                                         "sliding_attention", "full_attention"]
    return minimax().flatten_config(raw)


@pytest.mark.parametrize("device,want", [("cpu", "dense"), ("sm90", "triton_window_block"),
                                         ("sm100", "triton_window_block")])
def test_table_per_device(device, want):
    t = validate_lowerings(flat(), device)
    assert t.lowerings == (want,) * 5 and t.needs_context_kernel is False


@pytest.mark.parametrize("head_dim", [72, 80, 96])
def test_windowed_head_dims_without_context_kernel_accepted(head_dim):
    assert not validate_lowerings(flat(head_dim), "sm90").needs_context_kernel


def test_adapter_form_uses_its_config():
    assert validate_lowerings(minimax(), "sm90").lowerings == ("triton_window_block",) * 5


@pytest.fixture
def ctx_lowering():
    """A lowering that needs the context kernel (like TensorRT-LLM's own backend would)."""
    info = dataclasses.replace(LOWERINGS["dense"], name="needs_ctx_test", needs_context_kernel=True)
    LOWERINGS[info.name] = info
    yield info.name
    del LOWERINGS[info.name]


def test_context_kernel_need_is_derived_and_checked(ctx_lowering):
    cfg = flat(80)
    cfg["draftsmith"]["layers"][1]["lowering"]["sm90"] = ctx_lowering
    with pytest.raises(UserError, match=r"layer 1 \(full\).*context kernel.*80"):
        validate_lowerings(cfg, "sm90")
    cfg = flat(128)
    cfg["draftsmith"]["layers"][1]["lowering"]["sm90"] = ctx_lowering
    assert validate_lowerings(cfg, "sm90").needs_context_kernel is True


def test_wrong_device_and_head_dim_refused():
    cfg = flat()
    cfg["draftsmith"]["layers"][0]["lowering"]["cpu"] = "trtllm_gen"
    with pytest.raises(UserError, match="layer 0.*trtllm_gen does not run on cpu"):
        validate_lowerings(cfg, "cpu")
    info = LOWERINGS["triton_window_block"]
    LOWERINGS[info.name] = dataclasses.replace(info, head_dims=(64, 72, 80, 96, 128, 256))
    try:
        with pytest.raises(UserError, match="head dims"):
            validate_lowerings(flat(48), "sm90")
    finally:
        LOWERINGS[info.name] = info
