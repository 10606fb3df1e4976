"""What vLLM 0.33.0 would run for an exported drafter folder, from vLLM's own code.

Runs (files of the ``vllm==0.33.0`` wheel, see readers.py):

- the speculators format (``speculators_config`` present; vLLM's ``HFConfigParser`` then
  picks ``SpeculatorsConfig``): ``transformers_utils/config.py``
  ``maybe_override_with_speculators`` (the entry point), ``transformers_utils/configs/speculators/base.py``
  ``SpeculatorsConfig.from_pretrained`` and ``extract_vllm_speculative_config`` (imported;
  ``algos.py``'s ``update_dflash`` / ``update_dspark`` run inside);
- other formats: transformers' ``AutoConfig`` (what ``HFConfigParser`` falls back to for
  ``qwen3``), wrapped as ``config/speculative.py`` does for ``method=dflash``:
  ``transformers_utils/configs/eagle.py`` ``EAGLEConfig(hf_config, method="dflash")``;
- ``transformers_utils/config.py`` ``patch_rope_parameters`` (``get_config`` runs it);
- ``model_executor/models/qwen3_dflash.py``: ``DFlashQwen3Model`` built (its
  ``DFlashQwen3DecoderLayer`` / ``DFlashQwen3Attention`` per layer:
  ``_resolve_layer_attention``, ``_dflash_layer_causal``, ``set_default_rope_theta``; the
  mask token, ``fc``'s input size), vLLM's layers (linears, norms, attention, RoPE: compiled
  kernels behind them) replaced by recorders of their arguments; ``qwen3_dspark.py``
  ``Qwen3DSparkModel`` (with its Markov / confidence heads) where vLLM's registry
  (``models/registry.py`` ``_SPECULATIVE_DECODING_MODELS``) picks it; RoPE from
  ``layers/rotary_embedding/__init__.py`` ``get_rope`` (its RoPE classes recorded); ``models/qwen2.py``
  ``Qwen2MLP``; ``models/utils.py`` ``WeightsMapper`` (the model's ``hf_to_vllm_mapper``
  maps every exported tensor name onto the built module tree);
  ``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`` ``get_eagle3_aux_layers_from_config``
  (the target layers captured);
- DFlash 2 (:func:`dflash2`): ``model_executor/models/qwen3_dflash2.py`` ``DFlash2Qwen3ForCausalLM``
  (``DFlash2Qwen3Model``, ``DFlash2Qwen3DecoderLayer``, ``DFlashGroupedConv``, ``_grouped_conv``,
  ``CandidateSelector``, ``_score_edges``, ``compute_candidates``) over ``qwen3_dflash.py``
  ``DFlashQwen3ForCausalLM.load_weights``, with ``layers/logits_processor.py`` ``LogitsProcessor``,
  ``models/utils.py`` ``AutoWeightsLoader`` and ``model_loader/weight_utils.py``
  ``default_weight_loader`` executed (every tensor loaded; the convolutions' and selector's
  projections run); the walk (``v1/worker/gpu/spec_decode/dflash2/speculator.py``
  ``_selector_walk_kernel``) is Triton and not run.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from readers import VLLM, NotRead, Obj, Stub, defs, load_and_account, real_module, recorder, norm_styles, src_root, with_recorders


class _Logger(logging.LoggerAdapter):
    """STUB for vllm/logger.py ``init_logger`` (imports vllm.logging_utils' formatters):
    a stdlib logger with vLLM's ``*_once`` methods."""

    def warning_once(self, msg, *args, **kwargs):
        self.warning(msg, *args)

    def info_once(self, msg, *args, **kwargs):
        self.info(msg, *args)

    def debug_once(self, msg, *args, **kwargs):
        self.debug(msg, *args)


def _init_logger(name):
    return _Logger(logging.getLogger(name), {})


def _logger_stub():
    return Stub("vllm.logger", "vllm/logger.py: init_logger (the real one imports vllm.logging_utils)",
                init_logger=_init_logger)


#: vLLM norm class -> the style it applies (vllm/model_executor/layers/layernorm.py: ``RMSNorm``
#: scales by ``w``, ``GemmaRMSNorm`` by ``1 + w``)
NORM_STYLES = {"RMSNorm": "plain", "GemmaRMSNorm": "gemma"}
#: vLLM RoPE class -> draftsmith's ``rope.type`` it computes (model_executor/layers/rotary_embedding/)
ROPE_TYPES = {"RotaryEmbedding": "default", "LinearScalingRotaryEmbedding": "linear",
              "YaRNScalingRotaryEmbedding": "yarn", "Llama3RotaryEmbedding": "llama3"}


def _model_classes(root: Path, config, layers: dict | None = None, extra: tuple = (), speculative_tokens=None):
    """qwen3_dflash.py's model classes executed with recorders for vLLM's layers (``layers``:
    other stand-ins by vLLM class name; ``extra``: more of qwen3_dflash.py's names, for
    :func:`_dflash2_classes`); the ``VllmConfig`` slice they read holds the draft ``config``
    (and ``num_speculative_tokens``)."""
    import regex

    v = root / "vllm"
    log = _init_logger("vllm.models")
    layers = layers or {}
    rope = defs(v / "transformers_utils/config.py", ["set_default_rope_theta"])
    aux = defs(v / "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", ["get_eagle3_aux_layers_from_config"])
    utils = defs(v / "model_executor/models/utils.py", ["ShardId", "ShardIds", "WeightsMapper", "maybe_prefix"],
                 {"re": regex, "logger": log, "torch": torch, "TypeAlias": object})
    vllm_config = Obj(speculative_config=Obj(draft_model_config=Obj(hf_config=config),
                                             num_speculative_tokens=speculative_tokens),
                      model_config=Obj(dtype=torch.float32, head_dtype=None,
                                       get_vocab_size=lambda: config.vocab_size,  # the verifier's: the draft's vocab
                                       get_total_num_hidden_layers=lambda: 0),  # prefixes layer names only
                      cache_config=None, use_v2_model_runner=True)  # mixed sliding/full layers need V2
    ns = {
        "nn": nn, "torch": torch, "re": regex, "logger": log,
        "Qwen3Config": object, "CacheConfig": object, "QuantizationConfig": object, "VllmConfig": object,
        "AttentionType": Obj(DECODER="decoder"),  # STUB: vllm/v1/attention/backend.py AttentionType (a str enum)
        "get_current_vllm_config": lambda: vllm_config,  # STUB: vllm/config get_current_vllm_config
        "get_tensor_model_parallel_world_size": lambda: 1,  # STUB: vllm.distributed (TP 1)
        "current_platform": Obj(is_rocm=lambda: False),  # STUB: vllm.platforms
        "support_torch_compile": lambda cls: cls,  # STUB: vllm.compilation.decorators (compiles forward only)
        "get_draft_quant_config": lambda vc: None,  # STUB: models/utils.py (no quantization here)
        "map_draft_quant_config": lambda *a: None,  # STUB: models/utils.py (no quantization here)
        "set_default_rope_theta": rope["set_default_rope_theta"],
        "get_eagle3_aux_layers_from_config": aux["get_eagle3_aux_layers_from_config"],
        "WeightsMapper": utils["WeightsMapper"], "maybe_prefix": utils["maybe_prefix"],
        "make_attention_sink": recorder("make_attention_sink"),
        # recorders for vllm.model_executor.layers.* (compiled kernels behind them)
        "QKVParallelLinear": recorder("QKVParallelLinear", nn.Module),
        "RowParallelLinear": recorder("RowParallelLinear", nn.Module),
        "ReplicatedLinear": recorder("ReplicatedLinear", nn.Module),
        "VocabParallelEmbedding": recorder("VocabParallelEmbedding", nn.Module),
        "UnquantizedLinearMethod": object,
        "Attention": recorder("Attention", nn.Module),
        "RMSNorm": recorder("RMSNorm", nn.Module),
        "GemmaRMSNorm": recorder("GemmaRMSNorm", nn.Module),
        # model_executor/layers/rotary_embedding/__init__.py get_rope, its RoPE classes recorded
        "get_rope": with_recorders(v / "model_executor/layers/rotary_embedding/__init__.py",
                                   ["_ROPE_DICT", "get_rope"], {"torch": torch}, nn.Module)["get_rope"],
    }
    ns.update(layers)
    ns["Qwen3MLP"] = defs(v / "model_executor/models/qwen2.py", ["Qwen2MLP"], {
        "nn": nn, "QuantizationConfig": object,
        "MergedColumnParallelLinear": recorder("MergedColumnParallelLinear", nn.Module),
        "RowParallelLinear": recorder("RowParallelLinear", nn.Module),
        "SiluAndMul": recorder("SiluAndMul", nn.Module),
        **{k: c for k, c in layers.items() if k in ("MergedColumnParallelLinear", "RowParallelLinear")}})["Qwen2MLP"]  # as Qwen3MLP
    defs(v / "model_executor/models/qwen3_dflash.py",
         ["_SLIDING_ATTENTION", "_dflash_layer_causal", "_resolve_layer_attention", "_get_dflash_fc_input_size",
          "DFlashQwen3Attention", "DFlashQwen3DecoderLayer", "DFlashQwen3Model", *extra], ns)
    ns["ParallelLMHead"] = recorder("ParallelLMHead", nn.Module)
    defs(v / "model_executor/models/qwen3_dspark.py", ["DSparkMarkovHead", "DSparkConfidenceHead", "Qwen3DSparkModel"], ns)
    return ns, vllm_config


#: vLLM's ``*ForCausalLM`` (registry.py) -> the backbone class it builds (its ``model_cls`` /
#: ``self.model``), for the two modules built here
BACKBONES = {("qwen3_dflash", "DFlashQwen3ForCausalLM"): "DFlashQwen3Model",
             ("qwen3_dspark", "Qwen3DSparkForCausalLM"): "Qwen3DSparkModel"}


def model_class(root: Path, architectures) -> tuple[str, str]:
    """vLLM's registry entry (``model_executor/models/registry.py``
    ``_SPECULATIVE_DECODING_MODELS``) for the draft's first architecture."""
    reg = defs(root / "vllm/model_executor/models/registry.py", ["_SPECULATIVE_DECODING_MODELS"])
    entry = reg["_SPECULATIVE_DECODING_MODELS"].get(architectures[0])
    if entry is None:
        raise NotRead(f"{VLLM} registers no draft model {architectures[0]} (model_executor/models/registry.py)")
    return tuple(entry)


def weight_targets(model, mapper, names) -> dict[str, str | None]:
    """Each exported tensor name -> the module path vLLM loads it into, or None where the
    built model has no such module (``DFlashQwen3ForCausalLM.load_weights``: ``model.`` +
    name, ``lm_head`` / ``d2t`` / ``t2d`` aside; then the model's ``hf_to_vllm_mapper``)."""
    out = {}
    for name in names:
        mapped = mapper.map_name(name)  # the name as DFlashQwen3Model.load_weights sees it
        if mapped is None:
            out[name] = None
            continue
        path = mapped.rsplit(".", 1)[0]
        try:
            model.get_submodule(path)
            out[name] = path
        except AttributeError:
            out[name] = None
    return out


def _speculators_entry(root: Path, base, folder: Path):
    """``transformers_utils/config.py`` ``maybe_override_with_speculators`` (how ``vllm serve
    <speculators checkpoint>`` starts): True when it accepts the folder, else its message."""
    import sys

    import huggingface_hub
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    from transformers import PreTrainedConfig

    utils = real_module(root, "vllm.transformers_utils.utils", [_logger_stub()])
    fn = defs(root / "vllm/transformers_utils/config.py", ["maybe_override_with_speculators"], {
        "huggingface_hub": huggingface_hub, "PreTrainedConfig": PreTrainedConfig,
        "without_trust_remote_code": utils.without_trust_remote_code,
        "validate_repo_id": validate_repo_id, "HFValidationError": HFValidationError})["maybe_override_with_speculators"]
    name = "vllm.transformers_utils.configs.speculators.base"
    sys.modules[name] = base  # the function imports SpeculatorsConfig from it at call time
    try:
        fn(str(folder), None, trust_remote_code=False)
        return True
    except ValueError as e:
        return str(e)
    finally:
        del sys.modules[name]


def _tensor_names(folder: Path) -> set[str]:
    from safetensors import safe_open

    out = set()
    for f in Path(folder).glob("*.safetensors"):
        with safe_open(str(f), framework="pt") as h:
            out.update(h.keys())
    return out


def _config(root: Path, folder: Path):
    """``(config, method, draft_tokens, serves)``: the draft config vLLM builds for ``folder``
    (speculators format or transformers' ``AutoConfig`` wrapped in ``EAGLEConfig``), its
    RoPE patched as ``get_config`` does; see :func:`read`."""
    import json

    from transformers import AutoConfig

    raw = json.loads((Path(folder) / "config.json").read_text())
    log = _logger_stub()
    if raw.get("model_type") is None and raw.get("speculators_config") is not None:
        base = real_module(root, "vllm.transformers_utils.configs.speculators.base", [log])
        spec = base.SpeculatorsConfig.extract_vllm_speculative_config(json.loads(json.dumps(raw)))
        config = base.SpeculatorsConfig.from_pretrained(str(folder))
        method, draft_tokens = spec["method"], spec["num_speculative_tokens"]
        serves = _speculators_entry(root, base, folder)
    else:
        arch = (raw.get("architectures") or ["?"])[0]
        try:  # served under method=dflash, EAGLEConfig renames an architecture X to DFlashX
            model_class(root, [arch])
        except NotRead:
            renamed = arch if arch.startswith("DFlash") else "DFlash" + arch
            if renamed == arch:
                raise
            try:
                model_class(root, [renamed])
            except NotRead:
                raise NotRead(f"{VLLM} registers no draft model {arch} (nor {renamed}; "
                              "model_executor/models/registry.py)") from None
        eagle = real_module(root, "vllm.transformers_utils.configs.eagle", [log])
        method, draft_tokens, serves = "dflash", None, True
        config = eagle.EAGLEConfig(AutoConfig.from_pretrained(str(folder)), method=method, model_type="eagle")
    cfg_utils = defs(root / "vllm/config/utils.py", ["getattr_iter"], {"logger": _init_logger("vllm.config")})
    patch = defs(root / "vllm/transformers_utils/config.py",
                 ["patch_rope_parameters", "patch_legacy_rope_type", "is_rope_parameters_nested"],
                 {"logger": _init_logger("vllm.config"), "Any": object,
                  "ALLOWED_LAYER_TYPES": __import__("transformers.configuration_utils",
                                                    fromlist=["ALLOWED_LAYER_TYPES"]).ALLOWED_LAYER_TYPES})
    import sys
    sys.modules.setdefault("vllm.config.utils", Stub("vllm.config.utils", "vllm/config/utils.py: getattr_iter (executed)",
                                                     getattr_iter=cfg_utils["getattr_iter"]))
    try:
        patch["patch_rope_parameters"](config)
    finally:
        del sys.modules["vllm.config.utils"]

    return config, method, draft_tokens, serves


def read(folder: Path) -> dict:
    """What vLLM would run for the drafter in ``folder``: ``layers`` [(causal, window)] with
    the window in draftsmith's convention (keys ``|p - k| <= W - 1``: vLLM's
    ``per_layer_sliding_window`` counts the query itself too), ``norms`` {kind: style},
    ``rope`` (theta, type, rotary_dim), ``mask_token_id``, ``target_layer_ids`` (outputs:
    vLLM's aux layer ids name layer inputs, each minus 1), ``fc_in`` (``fc``'s input width), ``draft_tokens``
    (``num_speculative_tokens`` the format fixes; None where the user passes it), ``method``,
    ``architectures``, ``qk_norm``, ``hidden_act``, ``serves`` (True, or why vLLM's entry
    point for a speculators checkpoint refuses it)."""
    root = src_root(VLLM)
    config, method, draft_tokens, serves = _config(root, folder)
    ns, vllm_config = _model_classes(root, config)
    entry = model_class(root, config.architectures)
    if entry == ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM"):
        raise NotRead(f"{VLLM} runs {config.architectures[0]} with qwen3_dflash2.DFlash2Qwen3ForCausalLM: "
                      "tests/upstream/readers/test_crosscheck_readers_dflash2.py reads it (readers_vllm.dflash2)")
    if entry not in BACKBONES:
        raise NotRead(f"{VLLM} runs {config.architectures[0]} with {entry[0]}.{entry[1]}, which this crosscheck does not build")
    model = ns[BACKBONES[entry]](vllm_config=vllm_config, prefix="model")
    layers = list(model.layers)
    rope = layers[0].self_attn.rotary_emb  # RotaryEmbedding(head_size, rotary_dim, max_position, base, is_neox_style, ...)
    aux = ns["get_eagle3_aux_layers_from_config"](vllm_config.speculative_config)
    names = sorted(_tensor_names(folder))
    skipped = [n for n in names if "lm_head" in n or "t2d" in n or "d2t" in n]
    return {
        "serves": serves, "method": method, "model": entry, "architectures": list(config.architectures or []), "draft_tokens": draft_tokens,
        "layers": [(l.self_attn.causal, None if l.self_attn.sliding_window is None else l.self_attn.sliding_window)
                   for l in layers],
        "norms": norm_styles(layers, model, NORM_STYLES),
        "qk_norm": all(hasattr(l.self_attn, "q_norm") and hasattr(l.self_attn, "k_norm") for l in layers),
        "rope": (float(rope.args[3]), ROPE_TYPES.get(rope.kind, rope.kind), rope.args[1]),
        "rope_neox": rope.args[4],
        "mask_token_id": model.mask_token_id,
        "sample_from_anchor": (getattr(config, "dflash_config", None) or {}).get(
            "sample_from_anchor", getattr(config, "sample_from_anchor", None)),
        "target_layer_ids": None if aux is None else tuple(i - 1 for i in aux),
        "fc_in": model.fc.kwargs["input_size"] if model.use_aux_hidden_state else None,
        "weights": weight_targets(model, model.hf_to_vllm_mapper, [n for n in names if n not in skipped]),
        "value_scale": layers[0].self_attn.v_scale,
        "hidden_act": config.hidden_act,
    }


# ---- DFlash 2: qwen3_dflash2.py built, every tensor loaded through vLLM's own load_weights --------


def _loading_layer(kind: str, loads: dict, shape=None, forward=None):
    """A recorder standing in for vLLM layer ``kind`` that holds a ``weight`` (and ``bias`` when
    built with ``bias=True``) whose ``weight_loader`` records what vLLM's loader hands it
    (``loads[id(tensor)] = (param, shard_id)``); ``shape(args, kwargs)``: the weight's shape where
    the layer's math is run (then the loader checks the size and copies, as vLLM's unquantized
    ``ReplicatedLinear.weight_loader`` does); ``forward``: that math."""
    base = recorder(kind, nn.Module)

    def loader(param, loaded):
        loads[id(loaded)] = (param, getattr(loaded, "shard_id", None))
        if param.numel():
            assert param.size() == loaded.size(), f"{kind}: loading {tuple(loaded.shape)} into {tuple(param.shape)}"
            param.data.copy_(loaded)

    def init(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        dims = shape(args, kwargs) if shape else (0,)
        self.weight = nn.Parameter(torch.zeros(dims, dtype=torch.float32), requires_grad=False)
        self.weight.weight_loader = loader
        if kwargs.get("bias"):
            self.bias = nn.Parameter(torch.zeros(dims[:1] if shape else (0,)), requires_grad=False)
            self.bias.weight_loader = loader

    body = {"__init__": init}
    if forward:
        body["forward"] = forward
    return type(kind, (base,), body)


def _arg(args, kwargs, i, name):
    return kwargs[name] if name in kwargs else args[i]


def _replicated_forward(self, x):
    """STUB of vLLM's ``ReplicatedLinear.forward``, unquantized at TP 1: ``x W^T (+ b)``, the
    output alone when built with ``return_bias=False``."""
    out = torch.nn.functional.linear(x, self.weight, getattr(self, "bias", None))
    return out if self.kwargs.get("return_bias") is False else (out, None)


def _lm_head_class(loads: dict):
    """STUB of vLLM's ``ParallelLMHead`` at TP 1, unquantized: a ``weight [vocab, hidden]`` (the
    verifier's head, set by the caller: the drafter borrows it), ``quant_method.apply`` =
    ``x W^T``, no vocabulary padding (``shard_indices``)."""
    base = _loading_layer("ParallelLMHead", loads, lambda a, k: (_arg(a, k, 0, "num_embeddings"),
                                                                 _arg(a, k, 1, "embedding_dim")))

    def init(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        self.tp_size = 1
        self.quant_method = Obj(apply=lambda layer, x, bias=None: torch.nn.functional.linear(x, layer.weight, bias))
        self.shard_indices = Obj(num_org_vocab_padding=0, org_vocab_start_index=0)

    return type("ParallelLMHead", (base,), {"__init__": init})


def _dflash2_classes(root: Path, config, speculative_tokens: int, loads: dict):
    """qwen3_dflash2.py's ``DFlash2Qwen3ForCausalLM`` (its ``DFlash2Qwen3Model``,
    ``DFlash2Qwen3DecoderLayer``, ``DFlashGroupedConv``, ``_grouped_conv``, ``CandidateSelector``,
    ``_score_edges``) over qwen3_dflash.py's ``DFlashQwen3ForCausalLM`` (``load_weights``), with
    ``layers/logits_processor.py`` ``LogitsProcessor`` and ``models/utils.py``
    ``AutoWeightsLoader`` / ``WeightsMapper`` / ``process_eagle_weight``, and
    ``model_loader/weight_utils.py`` ``default_weight_loader``, all executed; vLLM's layers are
    :func:`_loading_layer` recorders (``ReplicatedLinear`` runs: the convolutions' and the
    selector's projections)."""
    import contextlib

    import regex

    v = root / "vllm"
    log = _init_logger("vllm.models")
    loader = defs(v / "model_executor/model_loader/weight_utils.py", ["default_weight_loader"])["default_weight_loader"]

    def default_weight_loader(param, loaded):  # the real one, recording what it loads
        loads[id(loaded)] = (param, None)
        loader(param, loaded)

    vocab = _loading_layer("VocabParallelEmbedding", loads)
    layers = {k: _loading_layer(k, loads) for k in ("QKVParallelLinear", "RowParallelLinear",
                                                    "MergedColumnParallelLinear", "RMSNorm", "GemmaRMSNorm")}
    layers["VocabParallelEmbedding"] = vocab
    layers["ReplicatedLinear"] = _loading_layer(
        "ReplicatedLinear", loads, lambda a, k: (_arg(a, k, 1, "output_size"), _arg(a, k, 0, "input_size")),
        _replicated_forward)
    layers["ParallelLMHead"] = _lm_head_class(loads)
    utils = defs(v / "model_executor/models/utils.py",
                 ["ShardId", "ShardIds", "WeightsMapper", "_get_tied_embedding_params", "AutoWeightsLoader",
                  "StageMissingLayer", "PPMissingLayer", "maybe_prefix", "process_eagle_weight"],
                 {"re": regex, "logger": log, "torch": torch, "nn": nn, "TypeAlias": object,
                  "VocabParallelEmbedding": vocab, "default_weight_loader": default_weight_loader,
                  # STUB: model_loader/reload.py (re-quantizes on a reload; no quantization here)
                  "support_quantized_model_reload_from_hp_weights": lambda f: f,
                  # STUB: models/interfaces.py (sets has_own_lm_head flags of EAGLE models; DFlash 2 is not one)
                  "supports_any_eagle": lambda model: False})
    vllm_config = None

    class PluggableLayer(nn.Module):
        """STUB: model_executor/custom_op.py ``PluggableLayer`` (a registry of out-of-tree
        replacements; none registered here)."""

        @classmethod
        def register(cls, name):
            return lambda c: c

    lp_ns = {"torch": torch, "F": torch.nn.functional, "logger": log, "PluggableLayer": PluggableLayer,
             "get_current_vllm_config": lambda: vllm_config,
             "current_platform": Obj(is_cuda=lambda: False, is_rocm=lambda: False, use_all_gather=lambda: False),
             "has_flashinfer": lambda: False,  # STUB: vllm/utils/flashinfer.py (CPU: torch.topk)
             "VocabParallelEmbedding": vocab, "UnquantizedEmbeddingMethod": object, "UnquantizedLinearMethod": object}
    logits = defs(v / "model_executor/layers/logits_processor.py", ["_flashinfer_topk", "_topk", "LogitsProcessor"], lp_ns)
    layers.update({
        "LogitsProcessor": logits["LogitsProcessor"],
        "AutoWeightsLoader": utils["AutoWeightsLoader"], "WeightsMapper": utils["WeightsMapper"],
        "process_eagle_weight": utils["process_eagle_weight"], "NestedTensors": object,
        "Qwen3ForCausalLM": nn.Module,  # DFlashQwen3ForCausalLM's base: its __init__ runs nn.Module.__init__ only
        "get_hf_file_bytes": lambda *a: None,  # STUB: transformers_utils/repo_utils.py (no mask_embedding.pt here)
    })
    ns, vllm_config = _model_classes(root, config, layers, ("DFlashQwen3ForCausalLM",), speculative_tokens)
    lp_ns["get_current_vllm_config"] = lambda: vllm_config
    logits["get_current_vllm_config"] = lambda: vllm_config
    ns.update({"F": torch.nn.functional, "set_model_tag": lambda tag: contextlib.nullcontext(),  # STUB: compilation/backends.py
               "DFlashQwen3ForCausalLM": ns["DFlashQwen3ForCausalLM"]})
    defs(v / "model_executor/models/qwen3_dflash2.py",
         ["_grouped_conv", "DFlashGroupedConv", "DFlash2Qwen3DecoderLayer", "_score_edges", "CandidateSelector",
          "DFlash2Qwen3Model", "DFlash2Qwen3ForCausalLM"], ns)
    return ns, vllm_config


#: parameters vLLM's DFlash 2 model holds that the drafter's file does not: the verifier's head and
#: embedding (shared at run time) and the optional ``mask_embedding.pt`` override
BORROWED = ("lm_head.weight", "model.embed_tokens.weight", "model.mask_embedding")
#: stacked parameters and the shards each needs (``DFlashQwen3Model.hf_to_vllm_mapper``)
SHARDS = {"qkv_proj": {"q", "k", "v"}, "gate_up_proj": {0, 1}}


def dflash2(folder: Path, speculative_tokens: int | None = None) -> dict:
    """What vLLM would run for the DFlash 2 drafter in ``folder``, every tensor loaded through
    ``DFlash2Qwen3ForCausalLM.load_weights``: ``model`` (the built module, weights loaded),
    ``conv`` {(taps, group_size, block)} over every convolution, ``selector`` (rank, top_k),
    ``unary`` (``candidate_logits_processor``'s scale, soft cap), ``input_embedding_scale``,
    ``layers`` [(causal, window)] (draftsmith's window convention, as :func:`read`),
    ``mask_token_id``, ``target_layer_ids``, ``draft_tokens``, ``weights`` {tensor: the parameter
    it loaded into, ``[shard]``}, ``unloaded`` (parameters no tensor reached, :data:`BORROWED`
    aside). ``speculative_tokens``: the ``--num-speculative-tokens`` a user passes where the
    format fixes none (the convolutions' block is ``1 +`` it)."""

    root = src_root(VLLM)
    config, method, draft_tokens, serves = _config(root, folder)
    entry = model_class(root, config.architectures)
    if entry != ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM"):
        raise NotRead(f"{VLLM} runs {config.architectures[0]} with {entry[0]}.{entry[1]}, not DFlash2Qwen3ForCausalLM")
    tokens = draft_tokens if draft_tokens is not None else speculative_tokens
    loads: dict = {}
    ns, vllm_config = _dflash2_classes(root, config, tokens, loads)
    vllm_config.speculative_config.draft_model_config.model = str(folder)  # where vLLM looks for mask_embedding.pt
    vllm_config.speculative_config.draft_model_config.revision = None
    model = ns["DFlash2Qwen3ForCausalLM"](vllm_config=vllm_config, prefix="")
    model.model._build_fused_kv_buffers = lambda: None  # STUB: fuses the loaded K/V weights for ops.* kernels
    weights, unloaded = load_and_account(model, folder, loads, SHARDS, BORROWED)
    layers = list(model.model.layers)
    convs = [c for l in layers for c in (l.attention_conv, l.mlp_conv)]
    sel = model.model.candidate_selector
    lp = model.candidate_logits_processor
    aux = ns["get_eagle3_aux_layers_from_config"](vllm_config.speculative_config)
    return {
        "model": model, "serves": serves, "method": method, "draft_tokens": draft_tokens,
        "conv": {(c.taps, c.group_size, c.block_size) for c in convs},
        "selector": (sel.predecessor_codebook.shape[1], sel.top_k),
        "unary": (lp.scale, lp.soft_cap),
        "input_embedding_scale": model.model.input_embedding_scale,
        "layers": [(l.self_attn.causal, l.self_attn.sliding_window) for l in layers],
        "mask_token_id": model.model.mask_token_id,
        "target_layer_ids": None if aux is None else tuple(i - 1 for i in aux),
        "weights": weights, "unloaded": unloaded,
    }
