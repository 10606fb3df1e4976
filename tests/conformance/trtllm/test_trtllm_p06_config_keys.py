"""Point 6 (config keys): the converted config says ``shift_label`` where TensorRT-LLM looks for it,
keeps the raw ``dspark_*`` fallbacks, sets ``use_sliding_window``; the snippet carries
``target_layer_ids``, ``mask_token_id``, ``block_size`` and a valid ``attention_backend``
(CONTRACT.md R6)."""

import pytest


def test_shift_label_resolves_to_the_trained_slot_convention(case):
    # the stand-in's resolve_dspark_head_config, in the worker process before it imports anything else
    got = case.worker()["shift_label"]
    assert got is not None and bool(got) == case.sample_from_anchor, (
        f"{case.adapter}: TensorRT-LLM resolves shift_label={got!r} from the converted config "
        f"(dspark_config, dflash_config, dspark_shift_label, shift_label); the drafter has "
        f"sample_from_anchor={case.sample_from_anchor}")


def test_dspark_fallback_keys_survive_conversion(case):
    raw = case.raw_config
    keys = {k: v for k, v in raw.items() if k.startswith("dspark_") and not isinstance(v, dict)}
    text = raw.get("text_config") or {}
    keys.update({k: v for k, v in text.items() if k.startswith("dspark_") and not isinstance(v, dict)})
    if not keys:
        pytest.skip(f"{case.adapter}: the raw config has no top-level dspark_* keys")
    lost = {k: v for k, v in keys.items() if case.config.get(k) != v}
    assert not lost, f"{case.adapter}: conversion dropped or changed the dspark_* fallbacks {lost}"


def test_use_sliding_window_is_explicit_and_no_window_is_inferred(case):
    assert isinstance(case.config.get("use_sliding_window"), bool), (
        f"{case.adapter}: converted config has use_sliding_window={case.config.get('use_sliding_window')!r}")
    for backend, out in case.serve()["backends"].items():
        inferred = [w for w in out.get("warnings", []) if "inferred" in w]
        assert not inferred, f"{case.adapter} {backend}: TensorRT-LLM would warn: {inferred[0]}"


def test_snippet_carries_the_drafter_keys(case):
    """The drafter's keys, as far as the pinned decoding config defines them: ``DFlashDecodingConfig``
    (NVIDIA llm_args.py @ 00043967) has ``mask_token_id`` and ``target_layer_ids`` but no ``block_size``
    (``StrictBaseModel`` refuses it: test_trtllm_p14_decoding_config.py); ``DSparkDecodingConfig`` also
    has ``block_size``."""
    res = case.serve()
    snip = res["snippet"]
    dc = case.config["dflash_config"]
    want = {"mask_token_id": dc["mask_token_id"], "target_layer_ids": dc["target_layer_ids"],
            "max_draft_len": case.config["draftsmith"]["max_draft_len"]}
    if not case.is_dflash:
        want["block_size"] = dc["block_size"]
    got = {k: snip.get(k) for k in want}
    assert got == want, f"{case.adapter}: speculative_config {got}, want {want}"
    if case.is_dflash:
        assert "block_size" not in snip, f"{case.adapter}: the DFlash snippet carries block_size, which DFlashDecodingConfig lacks"
    assert snip.get("attention_backend") in ("AUTO", "VANILLA", "TRTLLM"), snip.get("attention_backend")
