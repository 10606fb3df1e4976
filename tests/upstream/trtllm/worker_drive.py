"""One process of a TensorRT-LLM deployment of an emitted package, on TensorRT-LLM's verbatim
registries (``$DRAFTSMITH_TRTLLM_SRC/deep/loader.py``), in a fresh interpreter.

``python worker_drive.py ARGS.json``; ``ARGS["role"]``:

- ``serve``: the ``trtllm-serve --custom_module_dirs PKG`` process. Imports the package as
  ``import_custom_module_from_dir`` does (NVIDIA ``tensorrt_llm/tools/importlib_utils.py``, stored id
  375741901: the folder's parent put first on ``sys.path``, then ``importlib.import_module(name)``),
  then records what the proxy hands its workers: ``export_external_model_modules()`` and
  ``sys.path`` (``MpiPoolSession._start_mpi_pool``: ``MPIPoolExecutor(..., path=sys.path, env=<TRTLLM*,
  TLLM* only>)``, NVIDIA ``llmapi/mpi_session.py``, stored id 57451790670; mpi4py's worker extends its
  ``sys.path`` with it, ``futures/_lib.py`` ``_sync_set_data``).
- ``worker``: one rank of the model. Receives only that (the exported architecture -> module map, the
  parent's ``sys.path``), the LLM args' ``speculative_config`` and target model folder, and its
  mapping. In TensorRT-LLM's order: ``register_external_model_modules(map)``; the target's class
  through ``get_model_architecture`` (the model loader's first lookup; the draft model is built
  inside the target's constructor, ``SpecDecOneEngineForCausalLM.__init__``, NVIDIA
  ``_torch/models/modeling_speculative.py``, stored id 57359121401); the drafter's ``ModelConfig``;
  ``get_registered_draft_model_builder(mode)`` and the builder call (``get_draft_model``, same file);
  ``load_weights`` (verbatim ``DFlashForCausalLM.load_weights``); one draft step through the verbatim
  statement of ``DFlashWorker._forward_impl`` that calls ``draft_model.dflash_forward(...)``.

What this driver does itself, because the excerpts do not hold it (each marked STAND-IN below):
the target model class (MiniMax-M3's, registered lazily under its architecture as the zoo does), the
worker's inputs to ``dflash_forward`` (context K/V over TensorRT-LLM's VANILLA dense arena, block
embeddings from the target's embedding, written from the ``dflash_forward`` contract in CONTRACT.md
R9/R11), ``lm_head`` and the DSpark Markov chain on its rows, ``RMSNorm.forward`` (flashinfer in
TensorRT-LLM), and the TP all-reduce (NCCL there, gloo here).

Writes one JSON object to ``ARGS["result"]``.
"""

import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import traceback
import types
from pathlib import Path

#: the target architecture the stand-in target module registers (NVIDIA _torch/models/modeling_minimaxm3.py:
#: ``@register_auto_model("MiniMaxM3SparseForCausalLM")`` on ``MiniMaxM3ForCausalLM``; CONTRACT.md)
TARGET_ARCH = "MiniMaxM3SparseForCausalLM"
TARGET_MODULE = "modeling_minimaxm3"


def err(e):
    return {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=8)}


def install_shim(src: str):
    """The verbatim shim, plus the STAND-IN target module of the model zoo (lazily imported)."""
    sys.path.insert(0, str(Path(src) / "deep"))
    import loader

    shim = loader.install()
    mu = importlib.import_module("tensorrt_llm._torch.models.modeling_utils")

    def target_module():
        # STAND-IN for NVIDIA tensorrt_llm/_torch/models/modeling_minimaxm3.py: only the class identity
        # and its registration matter here (the target's forward is not under test)
        ns = {"__name__": f"tensorrt_llm._torch.models.{TARGET_MODULE}"}

        class MiniMaxM3ForCausalLM(mu.DecoderModelForCausalLM):
            """STAND-IN: the built-in target class (registration only)."""

        MiniMaxM3ForCausalLM.__module__ = ns["__name__"]
        ns["MiniMaxM3ForCausalLM"] = mu.register_auto_model(TARGET_ARCH)(MiniMaxM3ForCausalLM)
        return ns

    mu.MODEL_ARCH_TO_MODULE[TARGET_ARCH] = TARGET_MODULE  # the static index row the real zoo has
    finder = next(f for f in sys.meta_path if type(f).__name__ == "_ZooFinder")
    finder.factories[f"tensorrt_llm._torch.models.{TARGET_MODULE}"] = target_module
    return shim, mu


def serve(a):
    shim, mu = install_shim(a["src"])
    pkg = Path(a["package_dir"])
    # tensorrt_llm/tools/importlib_utils.py import_custom_module_from_dir (stored id 375741901)
    if str(pkg.parent) not in sys.path:
        sys.path.insert(0, str(pkg.parent))
    importlib.import_module(pkg.name)
    return {"exported": mu.export_external_model_modules(), "sys_path": list(sys.path),
            "serving_builder_module": {m.name: getattr(mu.DRAFT_MODEL_BUILDER_MAPPING.get(m), "__module__", None)
                                       for m in shim.Mode}}


def rms_norm_forward(self, hidden_states, residual=None):
    """STAND-IN for ``RMSNorm.forward`` (flashinfer kernels in TensorRT-LLM): the fused residual form
    returns ``(norm(x + residual), x + residual)``; Gemma style scales by ``1 + w``."""
    import torch

    if residual is not None:
        hidden_states = hidden_states + residual
        residual = hidden_states
    x = hidden_states.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    w = self.weight.float()
    out = (x * (1 + w) if self.use_gemma else x * w).to(hidden_states.dtype)
    return out if residual is None else (out, residual)


def linear_forward(self, input, *, all_reduce_params=None, lora_params=None, layer_idx=None):
    """STAND-IN for ``Linear.forward`` (omitted from deep/linear_excerpt.py): the verbatim
    ``apply_linear``; a ROW Linear adds its bias on rank 0 only and all-reduces (``self.all_reduce``,
    built by the verbatim ``__init__``); COLUMN layers here never gather (CONTRACT.md, tensor
    parallelism row)."""
    tp_mode = type(self).__init__.__globals__["TensorParallelMode"]
    row = self.tp_mode == tp_mode.ROW and self.tp_size > 1
    bias = None if row and self.tp_rank != 0 else self.bias
    out = self.apply_linear(input, bias, lora_params, layer_idx)
    if row and self.all_reduce is not None:
        out = self.all_reduce(out, all_reduce_params=all_reduce_params)
    return out


def gloo_all_reduce():
    """STAND-IN for ``_torch.distributed.AllReduce`` (NCCL): the sum over the TP group, on gloo."""
    import torch.distributed as dist

    class AllReduce:
        def __init__(self, mapping=None, strategy=None, dtype=None, **_):
            self.mapping = mapping

        def __call__(self, x, all_reduce_params=None, **_):
            if self.mapping is None or self.mapping.tp_size == 1:
                return x
            y = x.clone()
            dist.all_reduce(y)
            return y

    return AllReduce


def context_kv(at, hidden, pos, r, nkv, hd):
    """``(k [C, nkv, hd], v)`` of one layer's ``self_attn`` over the context features ``hidden [C, h]``
    at positions ``pos``: the fused ``qkv_proj`` split per rank, ``k_norm`` when present, RoPE on k
    (what the worker's ``precompute_context_kv`` stores in the cache)."""
    qs, kvs, c = at.q_size, at.kv_size, hidden.shape[0]
    qkv = at.qkv_proj(hidden)
    k = qkv[:, qs:qs + kvs].reshape(c, nkv, hd)
    if hasattr(at, "k_norm"):
        k = at.k_norm(k.reshape(-1, hd)).reshape(c, nkv, hd)
    k = rope(k.cpu(), pos.cpu(), r.dims.rotary_dim, r.rope.theta).to(qkv.device)
    return k, qkv[:, qs + kvs:].reshape(c, nkv, hd)


def rope(x, pos, rotary_dim, theta):
    """NeoX RoPE over the first ``rotary_dim`` dims of ``x [T, h, d]`` at ``pos [T]`` (the worker's
    context keys; ``precompute_context_kv`` in TensorRT-LLM)."""
    import torch

    half = rotary_dim // 2
    inv = 1.0 / (theta ** (torch.arange(0, half, dtype=torch.float64) * 2 / rotary_dim))
    ang = pos.double()[:, None] * inv[None, :]
    cos, sin = ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:rotary_dim]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., rotary_dim:]], -1)


def worker(a):
    import torch

    # what mpi4py's worker does with what the proxy sent: sys.path.extend(path)
    sys.path.extend(p for p in a["sys_path"] if p not in sys.path)
    shim, mu = install_shim(a["src"])
    res = {"imported_at_start": sorted(m for m in sys.modules if m.startswith("draftsmith_"))}
    m = a["mapping"]
    if m["tp_size"] > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=a["dist_init"], rank=m["rank"], world_size=m["tp_size"])
        sys.modules["tensorrt_llm._torch.distributed"].AllReduce = gloo_all_reduce()  # Linear.__init__ imports it
    sys.modules["tensorrt_llm._torch.modules.rms_norm"].RMSNorm.forward = rms_norm_forward
    sys.modules["tensorrt_llm._torch.modules.linear"].Linear.forward = linear_forward
    os.environ["TRT_LLM_DISABLE_LOAD_WEIGHTS_IN_PARALLEL"] = "1"  # _load_weights_impl's serial branch (deep/)
    # the ../trtllm_src excerpt of DFlashForCausalLM omits load_weights and what it reads; the verbatim
    # ones (amukkara modeling_dflash.py @ d70a2287, deep/dflash_excerpt.py) are attached to the same class
    # (as deep/loader.py attaches _validate_dflash2_config)
    dfl_cls = importlib.import_module("tensorrt_llm._torch.models.modeling_dflash").DFlashForCausalLM
    shell = shim.dflash_shell["DFlashLoadShell"]
    for attr in ("load_weights", "WRAPPER_OWNED_WEIGHTS", "WEIGHTS_SHARED_WITH_TARGET", "_assert_backbone_complete"):
        setattr(dfl_cls, attr, shell.__dict__[attr])

    mu.register_external_model_modules(a["exported"])  # what the proxy hands the worker (PR #18284)
    target_cfg = types.SimpleNamespace(**json.loads((Path(a["target_dir"]) / "config.json").read_text()))
    target_cls, _ = mu.get_model_architecture(target_cfg)  # the model loader's first lookup
    res["target_class"] = {"module": target_cls.__module__, "name": target_cls.__name__,
                           "bases": [f"{b.__module__}.{b.__name__}" for b in target_cls.__mro__[1:3]],
                           "own_attributes": sorted(k for k in vars(target_cls)
                                                    if k not in ("__module__", "__qualname__", "__doc__",
                                                                 "__dict__", "__weakref__", "__orig_bases__",
                                                                 "__parameters__", "_registered_architectures"))}
    res["imported_before_builder_lookup"] = sorted(x for x in sys.modules if x.startswith("draftsmith_"))

    spec = a["speculative_config"]  # the LLM args' speculative_config (the emitted snippet)
    mapping = shim.Mapping(world_size=m["tp_size"], tp_size=m["tp_size"], rank=m["rank"])
    spec_config = types.SimpleNamespace(**spec, draft_is_embedded_in_target=False)
    model_config = shim.ModelConfig(pretrained_config=target_cfg, spec_config=spec_config, mapping=mapping)
    # ModelConfig.from_pretrained(spec_config.speculative_model, ...): the loaded config as an attribute bag
    raw = json.loads((Path(spec["speculative_model"]) / "config.json").read_text())
    raw["torch_dtype"] = torch.float32
    draft_config = shim.ModelConfig(pretrained_config=types.SimpleNamespace(**raw), mapping=mapping)
    mode = shim.Mode[{"DFlash": "DFLASH", "DSpark": "DSPARK"}[spec["decoding_type"]]]
    builder = mu.get_registered_draft_model_builder(mode)  # get_draft_model's lookup
    res["builder"] = f"{builder.__module__}.{builder.__name__}"
    try:
        dm = builder(model_config, draft_config, None, None)
    except BaseException as e:  # noqa: BLE001 - the outcome is the datum
        res["build"] = err(e)
        return res
    res["drafter_class"] = f"{type(dm).__module__}.{type(dm).__name__}"
    res["drafter_mro"] = [f"{c.__module__}.{c.__name__}" for c in type(dm).__mro__[:4]]

    from safetensors.torch import load_file

    weights = {}
    for f in sorted(Path(spec["speculative_model"]).glob("*.safetensors")):
        weights.update(load_file(str(f)))
    weights = {k: v.float() for k, v in weights.items()}
    # GQADSparkForCausalLM.load_weights (not excerpted) takes the DSpark head tensors before the generic
    # path (deep/PROVENANCE.md); the Markov chain below reads them from here
    heads = {k: weights.pop(k) for k in list(weights) if k.startswith(("markov_head.", "confidence_head."))}
    try:
        dm.load_weights(weights=weights, weight_mapper=None)
    except BaseException as e:  # noqa: BLE001
        res["load"] = err(e)
        return res
    dm.float()  # the checkpoint's bf16 values, computed in float32 for the comparison with the float64 oracle
    try:
        res["draft"] = draft(shim, dm, a, heads)
    except BaseException as e:  # noqa: BLE001
        res["draft"] = err(e)
    return res


def draft(shim, dm, a, heads):
    """One greedy draft step of one sequence through ``dflash_forward`` (STAND-IN worker inputs)."""
    import torch
    from safetensors.torch import load_file

    call = shim.dflash_shell["worker_calls_dflash_forward"]  # the worker's verbatim dflash_forward(...) call
    data = torch.load(a["inputs"])
    tgt = load_file(str(Path(a["target_dir"]) / "model.safetensors"))
    emb, head = tgt["model.embed_tokens.weight"].float(), tgt["lm_head.weight"].float()
    r = dm._draftsmith_package.resolved
    spec = a["speculative_config"]
    blk, c = r.block_size, data["hidden"].shape[0]
    hidden = dm.hidden_norm(dm.fc(data["hidden"].float()))
    layers = dm.model.layers
    a0 = layers[0].self_attn
    L, nkv, hd = len(layers), a0.num_key_value_heads, a0.head_dim
    g = torch.Generator().manual_seed(4242)
    # TensorRT-LLM's VANILLA dense arena [slots, L, capacity, nkv, hd]; slots 0 and 2 other requests
    kc = torch.randn(3, L, c + blk, nkv, hd, generator=g)
    vc = torch.randn(3, L, c + blk, nkv, hd, generator=g)
    pos = torch.arange(c)
    with torch.no_grad():
        for i, layer in enumerate(layers):
            kc[1, i, :c], vc[1, i, :c] = context_kv(layer.self_attn, hidden, pos, r, nkv, hd)
        ids = torch.tensor([int(data["anchor"])] + [int(spec["mask_token_id"])] * (blk - 1))
        inputs = {"noise_embedding": emb[ids][None], "query_positions": torch.arange(c, c + blk)[None],
                  "num_ctx_per_req": torch.tensor([c], dtype=torch.int32), "ctx_k_cache": kc, "ctx_v_cache": vc,
                  "ctx_cache_batch_idx": torch.tensor([1]), "ctx_kv_cache": None, "ctx_page_table": None}
        calls = record_lowerings()
        out = call(dm, inputs)
        first = 0 if r.sample_from_anchor else 1
        rows = out[first:first + spec["max_draft_len"]] @ head.T
        toks, logit_rows, prev = [], [], int(data["anchor"])
        for j in range(rows.shape[0]):
            row = rows[j].clone()
            if "markov_head.markov_w1.weight" in heads:  # the worker's Markov chain on the lm_head rows
                row += heads["markov_head.markov_w2.weight"] @ heads["markov_head.markov_w1.weight"][prev]
            prev = int(row.argmax())
            toks.append(prev)
            logit_rows.append(row.tolist())
    return {"tokens": toks, "logits": logit_rows, "lowerings_called": calls}


def record_lowerings():
    """Wrap every registered lowering's function (in its module, where ``LoweringInfo.fn`` reads it) so
    each call appends the lowering's name; the emitted block decode resolves them on its first call."""
    from draftsmith.lowering.base import LOWERINGS, get_lowering

    calls = []
    for name in list(LOWERINGS):
        info = get_lowering(name)
        module = importlib.import_module(f"draftsmith.lowering.{info.module}")
        fn = getattr(module, info.function)

        def rec(*x, _f=fn, _n=name, **k):
            calls.append(_n)
            return _f(*x, **k)

        setattr(module, info.function, rec)
    return calls


def main():
    a = json.loads(Path(sys.argv[1]).read_text())
    try:
        res = {"serve": serve, "worker": worker}[a["role"]](a)
    except BaseException as e:  # noqa: BLE001
        res = {"fatal": err(e)}
    Path(a["result"]).write_text(json.dumps(res, default=str))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
