"""Drive an emitted package through the stand-in TensorRT-LLM's call sequence, in a fresh process.

Run as ``python drive.py ARGS.json`` with the stand-in on ``sys.path`` (done below). Modes:

- ``serve``: the ``trtllm-serve --custom_module_dirs PKG`` process: imports the package first.
- ``worker``: a worker process that never imported it: only the architecture -> module map
  the serving process exported is declared (``register_external_model_modules``).
- ``import``: only import the package (version-floor checks).
- ``config``: no package; what the stand-in reads from the checkpoint's config (``worker``
  records the same first, before anything else happens in that process).

Writes one JSON object to ``ARGS["result"]``. Every stage's failure is recorded as
``{"error": "Type: message"}`` and the driver goes on with what does not depend on it.
"""

import json
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "standin"))

import torch  # noqa: E402


def err(e):
    return {"error": f"{type(e).__name__}: {e}", "type": type(e).__name__, "message": str(e),
            "trace": traceback.format_exc(limit=6)}


def load_tensors(path):
    from safetensors import safe_open

    out = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(f), "pt") as s:
            for k in s.keys():
                out[k] = s.get_tensor(k)
    return out


def target_model(target_dir, mapping=None):
    """The target's embedding and ``lm_head`` (unsharded); with ``mapping`` (``ARGS["shard_lm_head"]``)
    the ``lm_head`` is the rank's vocabulary shard, an ``LMHead`` COLUMN without ``gather_output``,
    so the drafter's logits are vocab-sharded as TensorRT-LLM's DFlash 2 global top-k expects them."""
    from torch import nn

    from tensorrt_llm._torch.modules.decoder_model import Embedding
    from tensorrt_llm._torch.modules.embedding import LMHead
    from tensorrt_llm._torch.modules.linear import Linear, TensorParallelMode

    t = load_tensors(target_dir)
    emb, head = t["model.embed_tokens.weight"], t["lm_head.weight"]
    m = nn.Module()
    m.model = nn.Module()
    m.model.embed_tokens = Embedding(*emb.shape)
    m.model.embed_tokens.weight.data = emb.float()
    if mapping is None:
        m.lm_head = Linear(head.shape[1], head.shape[0], bias=False)
        m.lm_head.weight.data = head.float()
    else:
        m.lm_head = LMHead(head.shape[0], head.shape[1], mapping=mapping,
                           tensor_parallel_mode=TensorParallelMode.COLUMN, gather_output=False)
        width = m.lm_head.out_features
        m.lm_head.weight.data = head.float()[mapping.tp_rank * width:(mapping.tp_rank + 1) * width].clone()
    return m


def kv_agreement(dm):
    """Max |context key - block key| per layer for the same input row at the same position:
    ``precompute_context_kv`` (stacked k_norm applied plainly) vs the block path's k_norm module."""
    g = torch.Generator().manual_seed(7)
    a0 = dm.model.layers[0].self_attn
    y = torch.randn(5, dm.config.hidden_size, generator=g)
    pos = torch.arange(3, 8)
    kc, _ = dm.precompute_context_kv(y, pos)
    diffs = []
    for i, layer in enumerate(dm.model.layers):
        attn = layer.self_attn
        k = attn.qkv_proj(y)[:, a0.q_size:a0.q_size + a0.kv_size]
        if hasattr(attn, "k_norm"):
            k = attn.k_norm(k.reshape(-1, a0.head_dim))
        kb = dm._rope(k.reshape(5, a0.num_key_value_heads, a0.head_dim), pos)
        diffs.append(float((kb - kc[:, i]).abs().max()))
    return diffs


#: decoding_type -> mode, as the pinned decoding configs' ``spec_dec_mode`` properties answer
#: (NVIDIA llm_args.py @ 00043967, ``DFlashDecodingConfig`` / ``DSparkDecodingConfig``; there is no
#: ``SpeculativeDecodingMode.from_decoding_type``)
SPEC_DEC_MODE = {"DFlash": "DFLASH", "DSpark": "DSPARK"}
MANAGER_TOKENS_PER_BLOCK = 8  # several pages per request at the suite's context length


def draft_kv_cache_manager(dm):
    """A V1 draft KV cache manager sized for the drafter (every layer in one page-major pool)."""
    from tensorrt_llm._torch.pyexecutor.resource_manager import KVCacheManager

    a0 = dm.model.layers[0].self_attn
    return KVCacheManager(num_layers=len(dm.model.layers), num_kv_heads=a0.num_key_value_heads,
                          head_dim=a0.head_dim, tokens_per_block=MANAGER_TOKENS_PER_BLOCK, max_num_pages=24,
                          max_blocks_per_seq=8, generator=torch.Generator().manual_seed(99))


def main(args):
    res = {"mode": args["mode"]}
    import tensorrt_llm
    from tensorrt_llm.logger import RECORDS

    res["trtllm_version"] = tensorrt_llm.__version__
    if args["mode"] in ("config", "worker"):  # a process that never imported the package
        from tensorrt_llm._torch.models.modeling_dflash import resolve_dspark_head_config
        from tensorrt_llm._torch.pyexecutor.config_utils import load_pretrained_config

        cfg = load_pretrained_config(args["checkpoint"])
        res["shift_label"] = resolve_dspark_head_config(cfg, "shift_label")
        if args["mode"] == "config":
            return res
    pkg = Path(args["package_dir"])
    if args["mode"] in ("serve", "import"):
        from tensorrt_llm.serve import import_custom_module_dirs

        try:
            import_custom_module_dirs([pkg])
            res["import"] = {"ok": True}
        except BaseException as e:  # noqa: BLE001 - recorded for the test to judge
            res["import"] = err(e)
        if args["mode"] == "import":
            return res
        from tensorrt_llm._torch.models.modeling_utils import export_external_model_modules

        res["exported_arch_modules"] = export_external_model_modules()
    else:
        from tensorrt_llm._torch.models.modeling_utils import register_external_model_modules

        sys.path.insert(0, str(pkg.parent))  # the module named in the map is importable by name
        register_external_model_modules(args.get("arch_modules") or {})
    res["package_imported_before_build"] = pkg.name in sys.modules

    import yaml

    from tensorrt_llm._torch.model_config import ModelConfig
    from tensorrt_llm._torch.models.modeling_speculative import build_draft_config, get_draft_model
    from tensorrt_llm._torch.speculative import dflash_attention
    from tensorrt_llm._torch.speculative.dflash import DFlashWorker
    from tensorrt_llm._torch.speculative.interface import SpeculativeDecodingMode
    from tensorrt_llm.llmapi.llm_args import SpecConfig

    from tensorrt_llm.mapping import Mapping

    mapping = Mapping(**(args.get("mapping") or {}))  # the target's mapping (one rank of it)
    res["mapping"] = {"tp_size": mapping.tp_size, "rank": mapping.rank, "attention_dp": mapping.enable_attention_dp}
    snippet = yaml.safe_load((pkg / "speculative_config.yaml").read_text())["speculative_config"]
    snippet["speculative_model"] = args["checkpoint"]
    res["snippet"] = snippet
    data = torch.load(args["inputs"])
    tgt = target_model(args["target"], mapping if args.get("shard_lm_head") else None)
    res["backends"] = {}
    for run in args.get("backends") or ["VANILLA", "TRTLLM"]:
        # "NAME" or "NAME:arena": the paged backends bind the draft KV cache manager's pool unless
        # ":arena" (no manager: the worker's private arena); FA4 always uses the arena.
        backend, _, pool = run.partition(":")
        out = res["backends"][run] = {}
        RECORDS.clear()
        try:
            snip = {**snippet, "attention_backend": backend}
            # FA4 / XQA: DFlashForCausalLM @ d70a2287 runs them (its _supported_attention_backends);
            # whether the LLM-API config accepts them is not verified (CONTRACT.md, "Unverified").
            spec = SpecConfig(**snip) if backend in ("FA4", "XQA") else SpecConfig.from_snippet(snip)
            spec.spec_dec_mode = SpeculativeDecodingMode[SPEC_DEC_MODE[spec.decoding_type]]
            mc = ModelConfig(pretrained_config=None, spec_config=spec, mapping=mapping)
            dc = build_draft_config(mc)
            spec.resolve_from_drafter(dc.pretrained_config)
            out["spec_resolved"] = {k: getattr(spec, k) for k in ("block_size", "mask_token_id",
                                                                  "target_layer_ids", "markov_rank", "max_draft_len")}
            dm = get_draft_model(mc, dc, None, None)
            out["drafter_class"] = type(dm).__name__
            out["drafter_mro"] = [c.__module__ + "." + c.__name__ for c in type(dm).__mro__]
            out["shift_label"] = getattr(dm, "_dspark_shift_label", None)
        except BaseException as e:  # noqa: BLE001
            out["build"] = err(e)
            continue
        finally:
            out["warnings"] = [m for lvl, m in RECORDS if lvl == "warning"]
        n = dm.config.num_hidden_layers
        try:
            out["resolved"] = [list(dm._resolve_block_attention(i)) for i in range(n)]
        except BaseException as e:  # noqa: BLE001
            out["resolved"] = err(e)
        try:
            r = dm.validate_block_attention_windows()
            out["validate"] = {"returned": repr(r)}
        except BaseException as e:  # noqa: BLE001
            out["validate"] = err(e)
        try:
            dm.load_weights(weights=load_tensors(args["checkpoint"]), weight_mapper=None)
            dm.load_weights_from_target_model(tgt)
            out["kv_agreement"] = kv_agreement(dm)
            a0 = dm.model.layers[0].self_attn
            out["rank_layout"] = {"num_heads": a0.num_heads, "num_kv_heads": a0.num_key_value_heads,
                                  "qkv_rows": int(a0.qkv_proj.weight.shape[0]),
                                  "o_proj_cols": int(a0.o_proj.weight.shape[1]),
                                  "mlp_rows": int(dm.model.layers[0].mlp.gate_up_proj.weight.shape[0])}
        except BaseException as e:  # noqa: BLE001
            out["load"] = err(e)
            continue
        try:
            manager = None if pool == "arena" else draft_kv_cache_manager(dm)
            worker = DFlashWorker(spec, spec.spec_dec_mode is SpeculativeDecodingMode.DSPARK, manager,
                                  pool or "managed", mapping=mapping)
            worker.prepare(dm)
            before = len(dflash_attention.ENGINE_ATTENTION_CALLS)
            with torch.no_grad():  # TensorRT-LLM's executor runs the forward without autograd
                toks, logits, slots = worker.draft(dm, data["hidden"], int(data["anchor"]))
            out["engine_attention_calls"] = len(dflash_attention.ENGINE_ATTENTION_CALLS) - before
            out["pool"] = worker.layout
            out["tokens"], out["logits"], out["slots"] = toks.tolist(), logits.tolist(), slots.tolist()
            if worker.dflash2:  # DFlash 2: ``logits`` are the selector's path rows; these the lm_head's
                out["draft_logits"] = worker.dflash2["draft_logits"].tolist()
                out["has_block_conv"] = bool(dm.has_block_conv)
        except BaseException as e:  # noqa: BLE001
            out["decode"] = err(e)
    return res


if __name__ == "__main__":
    a = json.loads(Path(sys.argv[1]).read_text())
    try:
        result = main(a)
    except BaseException as e:  # noqa: BLE001
        result = {"fatal": err(e)}
    Path(a["result"]).write_text(json.dumps(result, default=str))
    # The result is written; interpreter shutdown is not under test here. A package whose import leaves
    # a thread blocking shutdown (seen once with branch emit's package, worker mode) would otherwise
    # stall the suite until the harness timeout.
    sys.stdout.flush()
    sys.stderr.flush()
    import os

    os._exit(0)
