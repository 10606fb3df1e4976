"""Point 6 (config keys): the converted config says ``shift_label`` where TensorRT-LLM looks for it,
carries the ``dspark_*`` fallbacks rendered from the record, sets ``use_sliding_window``; the snippet carries
``target_layer_ids``, ``mask_token_id``, ``block_size`` and a valid ``attention_backend``
(CONTRACT.md R6)."""



def test_shift_label_resolves_to_the_trained_slot_convention(case):
    # the stand-in's resolve_dspark_head_config, in the worker process before it imports anything else
    got = case.worker()["shift_label"]
    assert got is not None and bool(got) == case.sample_from_anchor, (
        f"{case.adapter}: TensorRT-LLM resolves shift_label={got!r} from the converted config "
        f"(dspark_config, dflash_config, dspark_shift_label, shift_label); the drafter has "
        f"sample_from_anchor={case.sample_from_anchor}")


#: DSparkDecodingConfig field -> the drafter config key it falls back to when unset (NVIDIA
#: tensorrt_llm/llmapi/llm_args.py @ 00043967: "If None, read from the draft model config (...)")
DSPARK_FALLBACKS = {"block_size": "dspark_block_size", "mask_token_id": "dspark_noise_token_id",
                    "target_layer_ids": "dspark_target_layer_ids", "markov_rank": "dspark_markov_rank",
                    "markov_head_type": "dspark_markov_head_type"}


def test_dspark_fallbacks_are_the_records(case):
    """The top-level ``dspark_*`` fallbacks carry the record's values (never the raw config's as
    read: ``minimax_dspark_v0``'s raw ones are null) for a DSpark drafter, and are absent for
    DFlash; the stand-in's ``DSparkDecodingConfig`` resolves ``markov_rank``, which the snippet
    leaves unset, from them."""
    rec = case.config["draftsmith"]
    got = {k: case.config[k] for k in DSPARK_FALLBACKS.values() if k in case.config}
    if case.is_dflash:
        assert not got, f"{case.adapter}: a DFlash config carries DSpark fallbacks {got}"
        return
    heads = rec["heads"]
    want = {"dspark_block_size": rec["block_size"], "dspark_noise_token_id": rec["mask_token_id"],
            "dspark_target_layer_ids": rec["target_layer_ids"], "dspark_markov_rank": heads["markov_rank"],
            "dspark_markov_head_type": heads["markov_head_type"]}
    assert got == want, f"{case.adapter}: top-level dspark_* {got}, the record says {want}"
    for backend, out in case.serve()["backends"].items():
        resolved = out.get("spec_resolved", {})
        assert resolved.get("markov_rank") == heads["markov_rank"], (case.adapter, backend, resolved)


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
