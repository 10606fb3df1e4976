"""Point 4 (raw checkpoints): pointing ``speculative_model`` at the unconverted checkpoint either
drafts correctly or is refused in one line that prints the ``draftsmith convert`` command; the
pinned version's drafter path honours no config-loader registration (CONTRACT.md R4)."""

from harness import assert_matches_oracle, one_line


def test_raw_checkpoint_is_served_correctly_or_refused_with_the_convert_command(case):
    out = case.drive("serve", checkpoint=case.source)["backends"]["VANILLA"]
    failure = next((out[k] for k in ("build", "load", "decode") if isinstance(out.get(k), dict)), None)
    if failure is None:
        assert_matches_oracle(case, out, "raw checkpoint")
        return
    msg = failure["message"]
    assert "draftsmith convert" in msg and f"adapter={case.adapter}" in msg and one_line(msg), (
        f"{case.adapter}: a raw checkpoint must be refused in one line printing "
        f"`draftsmith convert adapter={case.adapter} source=... out=...`; got {failure['error']}")


def _trtllm_fused_qkv(q, k, v, heads: int, kv_heads: int, head_dim: int):
    """The ``qkv_proj.weight`` TensorRT-LLM's own ``Attention`` holds after loading ``q``, ``k``, ``v``
    (TP 1): ``Attention.__init__``'s statements (deep/modules_excerpt.py, attention.py @ 00547a25) build
    the fused ``Linear`` and its shard map, and ``Linear.load_weights`` (deep/linear_excerpt.py) places
    each projection with ``allow_partial_loading=True``, as ``DFlashForCausalLM.load_weights`` calls it."""
    import verbatim_load

    ld = verbatim_load.deep_loader()
    shim = ld.install()
    try:
        shell = ld.modules_excerpt(shim)["AttentionTPShell"](
            hidden_size=q.shape[1], num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
            bias=False, dtype=q.dtype, config=shim.ModelConfig(mapping=shim.Mapping(world_size=1, rank=0, tp_size=1)))
        shell.qkv_proj.weight.data.fill_(float("nan"))  # poisoned: every row must come from the loader
        shell.qkv_proj.load_weights([{"weight": q}, {"weight": k}, {"weight": v}], allow_partial_loading=True)
        return shell.qkv_proj.weight.detach().clone()
    finally:
        verbatim_load.purge()


def test_trtllm_layout_split_recovers_what_trtllms_attention_fused(tmp_path):
    """``adapters/trtllm_dflash.yaml`` reads a checkpoint saved from TensorRT-LLM's drafter, whose fused
    ``qkv_proj`` is what its own ``Attention`` / ``Linear`` loader made of q, k and v (never draftsmith's
    synth, which fuses by inverting the adapter's own split). Fresh random q, k, v are fused by
    TensorRT-LLM's code, written into a trtllm_dflash checkpoint, converted; the converted q_proj, k_proj
    and v_proj must be the fresh tensors, bit for bit."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    import excerpts
    from draftsmith.framework.cli.main import main
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.convert.synth import synthesize

    excerpts.require()
    src = tmp_path / "S"
    synthesize(load_adapter("trtllm_dflash"), "tiny", src, seed=11)
    cfg = json.loads((src / "config.json").read_text())
    heads, kv_heads, hd, hidden = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                                   cfg["hidden_size"])
    tensors = load_file(str(src / "model.safetensors"))
    g = torch.Generator().manual_seed(torch.seed() % 2**31)
    fresh = {}
    for name in [n for n in tensors if n.endswith("self_attn.qkv_proj.weight")]:
        p = name.removesuffix("qkv_proj.weight")
        q, k, v = (torch.randn(rows * hd, hidden, generator=g).to(tensors[name].dtype) for rows in (heads, kv_heads, kv_heads))
        fused = _trtllm_fused_qkv(q, k, v, heads, kv_heads, hd)
        assert fused.shape == tensors[name].shape and not fused.isnan().any()
        tensors[name] = fused
        fresh.update({p + "q_proj.weight": q, p + "k_proj.weight": k, p + "v_proj.weight": v})
    assert fresh, "the trtllm_dflash checkpoint has no fused qkv_proj"
    save_file(tensors, str(src / "model.safetensors"))
    out = tmp_path / "T"
    assert main(["convert", "adapter=trtllm_dflash", f"source={src}", f"out={out}", "progress=false"]) == 0
    converted = {}
    for f in out.glob("*.safetensors"):
        converted.update(load_file(str(f)))
    bad = [n for n, t in fresh.items() if n not in converted or not torch.equal(converted[n], t)]
    assert not bad, f"converted q/k/v differ from the ones TensorRT-LLM fused: {bad}"
