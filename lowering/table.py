"""The built-in lowerings' registry entries: names, device classes, availability, descriptions
and pools, apart from the kernels (registering imports no kernel module, torch or triton; a
lowering's module is imported on first use of its function or availability)."""

from __future__ import annotations

from .base import LoweringInfo, register_lowering

BUILTIN_LOWERINGS: tuple[LoweringInfo, ...] = (
    LoweringInfo(
        name="dense",
        module="dense",
        function="dense",
        description="reference: explicit mask over gathered context + block K/V, fp32 softmax",
        devices=("cpu", "sm90", "sm100"),
    ),
    LoweringInfo(
        name="window_decode_merge",
        module="window_decode_merge",
        function="window_decode_merge",
        description="causal (window) decode over context + block prefix, merged by LSE "
        "with the block tail (SM100 structure, torch decode provider); no host read (CUDA-graph safe)",
        devices=("cpu", "sm90", "sm100"),
    ),
    LoweringInfo(
        name="trtllm_gen",
        module="trtllm_gen",
        function="trtllm_gen",
        description="window_decode_merge with part A from flashinfer trtllm-gen decode "
        "(base-2 LSE) over the paged pool read in place, the block's keys in scratch pages appended to "
        "each sequence's block table; no host read; SM100/SM103 only, never run in this repository's CI",
        devices=("sm100",),
        availability="available",
    ),
    LoweringInfo(
        name="triton_window_block",
        module="triton_window_block",
        function="triton_window_block",
        description=(
            "One Triton kernel: all B block queries x G query heads of a KV head packed in one tile, "
            "context K/V read once from the paged ring cache (only keys the mask reaches), "
            "exact section-2 mask, fp32 online softmax, split-KV with an LSE merge; CUDA-graph safe."
        ),
        devices=("cpu", "sm90", "sm100"),
        availability="available",
    ),
)

for _info in BUILTIN_LOWERINGS:
    register_lowering(_info)
