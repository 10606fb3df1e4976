"""What SGLang 0.5.23 would run for an exported drafter folder, from SGLang's own code.

Runs (files of the ``sglang==0.5.23`` wheel, see readers.py):

- the config: transformers' ``AutoConfig.from_pretrained`` (SGLang's ``get_config`` for a
  ``qwen3`` model type); the model class: ``srt/models/dflash.py``'s ``EntryClass`` (SGLang's
  registry keys a model class by its name, matched against ``architectures``);
- ``srt/models/dflash.py``: ``DFlashDraftModel`` built (``DFlashDecoderLayer``,
  ``DFlashAttention``, ``DFlashMLP``, ``_get_dflash_layer_attention_params``,
  ``_get_dflash_attention_type``), SGLang's layers (parallel linears, norms, RadixAttention,
  RoPE: kernels behind them) replaced by recorders of their arguments, each holding an empty
  ``weight`` (and ``bias``) parameter so that ``DFlashDraftModel.load_weights`` runs on the
  exported tensors and says which parameter each lands in (``fc`` is a real ``nn.Linear``:
  its shape check runs on the real tensor);
- ``srt/speculative/dflash_utils.py``: ``parse_dflash_draft_config`` and the helpers it and
  the model call (``get_dflash_layer_types``, ``get_dflash_attention_sliding_window_size``,
  ``is_nemotron_35_draft_config``, ...);
- ``srt/utils/hf_transformers/common.py`` ``get_rope_config``;
- ``srt/model_executor/model_runner_components/spec_aux_hidden_state.py``
  ``_resolve_dflash_aux_hidden_state`` and ``srt/models/qwen3.py``
  ``Qwen3ForCausalLM.set_dflash_layers_to_capture`` (which target layers are captured);
- ``srt/layers/radix_attention.py`` ``AttentionType``;
- DFlash 2 (:func:`dflash2`): ``srt/models/dflash.py`` ``DFlash2DraftModel`` and its aliases
  (``MiniMaxDFlash2DraftModel``, ``DFlash2BeamDraftModel``) with ``DFlashGroupedConv``,
  ``_grouped_conv``, ``CandidateSelector`` (``build_lattice``, ``_score_edges``, the CPU
  ``sample_path``, ``_follow_maps``), ``compute_candidates`` (``candidate_topk``,
  ``_transform_unary_logits``), every tensor through ``load_weights`` and SGLang's own
  ``default_weight_loader``; the MiniMax-M3 target's ``set_dflash_layers_to_capture``
  (``srt/models/minimax_m3_vl.py``).
"""

from __future__ import annotations

import functools
import json
from functools import partial
from pathlib import Path

import torch
from torch import nn

from readers import SGLANG, NotRead, Obj, Stub, defs, load_and_account, recorder, norm_styles, src_root, with_recorders

#: SGLang norm class -> the style it applies (srt/layers/layernorm.py: ``RMSNorm`` scales by
#: ``w``, ``GemmaRMSNorm`` by ``1 + w``)
NORM_STYLES = {"RMSNorm": "plain", "GemmaRMSNorm": "gemma"}
#: SGLang RoPE class -> draftsmith's ``rope.type`` it computes (srt/layers/rotary_embedding/)
ROPE_TYPES = {"RotaryEmbedding": "default", "LinearScalingRotaryEmbedding": "linear",
              "YaRNScalingRotaryEmbedding": "yarn", "Llama3RotaryEmbedding": "llama3"}


#: the model classes of srt/models/dflash.py this crosscheck builds (the others: aliases of
#: DFlashDraftModel with no body of their own)
BUILT = ("DFlashDraftModel", "MuseGlimmerAssistantModel")


def _layer(kind: str):
    """A recorder standing in for SGLang layer ``kind`` that holds an empty ``weight`` (and a
    ``bias`` when built with ``bias=True``), so the model's ``named_parameters`` names it."""
    base = recorder(kind, nn.Module)

    def init(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        self.weight = nn.Parameter(torch.empty(0), requires_grad=False)
        if kwargs.get("bias"):
            self.bias = nn.Parameter(torch.empty(0), requires_grad=False)

    return type(kind, (base,), {"__init__": init})


def _classes(root: Path, loads: dict, extra: tuple = (), names: dict | None = None):
    """srt/models/dflash.py's model classes (:data:`BUILT`, plus ``extra`` of its names) with
    recorders for SGLang's layers (``names``: more stand-ins); ``loads[id(tensor)]`` = (the
    parameter SGLang's ``default_weight_loader`` loaded it into, shard id)."""
    s = root / "sglang/srt"
    real_loader = defs(s / "model_loader/weight_utils.py", ["default_weight_loader"])["default_weight_loader"]
    utils = defs(s / "speculative/dflash_utils.py",
                 ["DEFAULT_DFLASH_MASK_TOKEN", "build_target_layer_ids", "get_dflash_layer_types",
                  "get_dflash_attention_sliding_window_size", "_cfg_get", "_get_text_config", "_get_dflash_config",
                  "is_nemotron_35_draft_config", "_parse_optional_int", "DFlashDraftConfig",
                  "parse_dflash_draft_config"])
    rope = defs(s / "utils/hf_transformers/common.py", ["get_rope_config"])
    attn = defs(s / "layers/radix_attention.py", ["AttentionType"])

    def default_weight_loader(param, loaded, *shard):  # model_loader/weight_utils.py's, recording the load
        loads[id(loaded)] = (param, shard[0] if shard else None)
        if param.numel():  # a real parameter (not a recorder's empty one): SGLang's own loader
            real_loader(param, loaded)

    ns = {
        "nn": nn, "torch": torch, "F": torch.nn.functional, "partial": partial, "logger": __import__("logging").getLogger("sglang"),
        "Optional": object, "Iterable": object, "Tuple": object,
        **{k: utils[k] for k in ("get_dflash_layer_types", "get_dflash_attention_sliding_window_size",
                                 "is_nemotron_35_draft_config", "parse_dflash_draft_config")},
        "get_rope_config": rope["get_rope_config"], "AttentionType": attn["AttentionType"],
        "get_parallel": lambda: Obj(tp_size=1),  # STUB: srt/runtime_context.py (TP 1)
        "get_spec": lambda: Obj(speculative_draft_attention_backend=None),  # STUB: srt/runtime_context.py
        "_is_npu": False,  # srt/utils is_npu() on this machine
        "set_weight_attrs": lambda p, attrs: None,  # STUB: srt/utils (no sharded loaders at TP 1)
        "sharded_weight_loader": lambda *a, **k: None,  # STUB: model_loader/weight_utils.py
        "default_weight_loader": default_weight_loader,
        "can_dflash_slice_qkv_weight": lambda qkv: (False, "stand-in"),  # STUB: dflash_utils (fused-kernel gate)
        "is_dense_head_weight": lambda w: False,  # STUB: dflash_utils (fused-kernel gate)
        "DraftParallelSpec": lambda **k: None, "DraftTPExecution": Obj(SINGLE_GROUP=None),  # STUB: configs/draft_parallel
        **{k: _layer(k) for k in ("QKVParallelLinear", "RowParallelLinear", "MergedColumnParallelLinear",
                                  "ColumnParallelLinear", "ReplicatedLinear", "VocabParallelEmbedding",
                                  "RMSNorm", "GemmaRMSNorm")},
        "RadixAttention": recorder("RadixAttention", nn.Module),
        # srt/layers/rotary_embedding/factory.py get_rope, its RoPE classes recorded
        "get_rope": with_recorders(s / "layers/rotary_embedding/factory.py",
                                   ["_get_rope_param", "_bailing_yarn_kwargs", "_ROPE_DICT", "_get_live_rope_cache_entry", "get_rope"],
                                   {"torch": torch, "_is_hip": False}, nn.Module)["get_rope"],
        "SiluAndMul": recorder("SiluAndMul", nn.Module),
    }
    ns.update(names or {})
    import contextlib

    # its @torch.compile functions (the DFlash 2 ones, in ``extra``) run as plain torch
    with torch._dynamo.config.patch(disable=True) if extra else contextlib.nullcontext():
        defs(s / "models/dflash.py",
             ["_get_dflash_attention_type", "_get_dflash_layer_attention_params", "_ROPE_DIM_SUPERSEDED_KEYS",
              "DFlashAttention", "DFlashMLP", "DFlashDecoderLayer", "DFlashDraftModel", *BUILT[1:], *extra], ns)
    ns["_dflash_utils"] = utils
    return ns


#: target model kind -> (its srt/models file, class): whose ``set_dflash_layers_to_capture`` runs
TARGETS = {"qwen3": ("models/qwen3.py", "Qwen3ForCausalLM"),
           "minimax_m3": ("models/minimax_m3_vl.py", "MiniMaxM3SparseForConditionalGeneration")}


def captured(root: Path, config, target_layers: int, target: str = "qwen3") -> tuple[int, ...]:
    """The target layer *outputs* SGLang feeds the drafter when serving it on a target of
    ``target_layers`` layers: ``spec_aux_hidden_state.py`` ``_resolve_dflash_aux_hidden_state``
    (its ids), then the target's ``set_dflash_layers_to_capture`` (:data:`TARGETS`; Qwen3's
    captures *before* layer ``id + 1``; MiniMax-M3's refuses ids not unique and sorted, then
    ``set_dspark_layers_to_capture`` does the same), converted back to outputs (each minus 1)."""
    s = root / "sglang/srt"
    utils = defs(s / "speculative/dflash_utils.py",
                 ["DEFAULT_DFLASH_MASK_TOKEN", "build_target_layer_ids", "_cfg_get", "_get_text_config",
                  "_get_dflash_config", "_parse_optional_int", "DFlashDraftConfig", "parse_dflash_draft_config"])
    draft_model_config = Obj(hf_config=config)
    aux = defs(s / "model_executor/model_runner_components/spec_aux_hidden_state.py",
               ["_MUSE_LAYER_OUTPUT_DRAFT_ARCHITECTURES", "_map_muse_target_layer_ids",
                "_resolve_dflash_aux_hidden_state"], {
                   "logger": __import__("logging").getLogger("sglang"),
                   # STUB: configs/model_config.py ModelConfig (the draft's hf config, as loaded)
                   "ModelConfig": Obj(from_server_args=lambda *a, **k: draft_model_config),
                   "get_spec": lambda: Obj(speculative_draft_model_path=None,
                                           speculative_draft_model_revision=None),  # STUB: runtime_context
                   "is_deepseek_v4": lambda c: False})
    import sys
    sys.modules["sglang.srt.speculative.dflash_utils"] = Stub(  # the function imports it at call time
        "sglang.srt.speculative.dflash_utils", "srt/speculative/dflash_utils.py: parse_dflash_draft_config "
        "(executed from that file; the module imports the sampling kernels)",
        parse_dflash_draft_config=utils["parse_dflash_draft_config"])
    out = Obj()
    try:
        aux["_resolve_dflash_aux_hidden_state"](
            config=out, server_args=None,
            model_config=Obj(hf_config=Obj(model_type=target), hf_text_config=Obj(num_hidden_layers=target_layers)),
            spec_algorithm=Obj(is_dflash_family=lambda: True, is_dspark=lambda: False), is_draft_worker=False)
    finally:
        del sys.modules["sglang.srt.speculative.dflash_utils"]
    path, cls = TARGETS[target]
    model = Obj(pp_group=Obj(is_last_rank=True), model=Obj(layers=[Obj() for _ in range(target_layers)]))
    fns = defs(s / path, [f"{cls}.set_dflash_layers_to_capture", f"{cls}.set_dspark_layers_to_capture"]
               if target == "minimax_m3" else [f"{cls}.set_dflash_layers_to_capture"], {"List": list})
    if target == "minimax_m3":
        model.set_dspark_layers_to_capture = partial(fns[f"{cls}_set_dspark_layers_to_capture"], model)
    fns[f"{cls}_set_dflash_layers_to_capture"](model, out.dflash_target_layer_ids)
    return tuple(i - 1 for i in model.model.layers_to_capture)


def entry_classes(path: Path) -> list[str]:
    """The class names model file ``path`` registers (its ``EntryClass``, a class or a list)."""
    import ast

    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "EntryClass":
            elts = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return [e.id for e in elts if isinstance(e, ast.Name)]
    return []


@functools.lru_cache(maxsize=None)
def model_file(root: Path, arch: str) -> Path:
    """The ``srt/models`` file whose ``EntryClass`` registers ``arch`` (SGLang's registry keys
    model classes by name)."""
    for f in sorted((root / "sglang/srt/models").glob("*.py")):
        text = f.read_text()
        if "EntryClass" in text and arch in text and arch in entry_classes(f):
            return f
    raise NotRead(f"{SGLANG} registers no model {arch} (srt/models/*.py EntryClass)")


def read(folder: Path) -> dict:
    """What SGLang would run for the drafter in ``folder``: ``layers`` [(causal, window)]
    (window in draftsmith's convention: SGLang's ``sliding_window_size`` is HF's window minus
    1, the keys left of the query), ``norms`` {kind: style}, ``rope`` (theta, type,
    rotary_dim), ``mask_token_id``, ``target_layer_ids`` (the target layer outputs
    SGLang captures, see :func:`captured`; a target of ``num_target_layers`` layers),
    ``block_size``, ``weights`` {tensor: parameter it loads into, or None: ignored}."""
    from safetensors import safe_open
    from transformers import AutoConfig

    root = src_root(SGLANG)
    raw = json.loads((Path(folder) / "config.json").read_text())
    arch = (raw.get("architectures") or ["?"])[0]
    f = model_file(root, arch)
    if f.name == "dflash.py" and arch in DFLASH2:
        raise NotRead(f"{SGLANG} runs {arch} with srt/models/dflash.py's DFlash 2 classes: "
                      "tests/upstream/readers/test_crosscheck_readers_dflash2.py reads it (readers_sglang.dflash2)")
    if f.name != "dflash.py" or arch not in BUILT:
        raise NotRead(f"{SGLANG} runs {arch} with srt/models/{f.name}, which this crosscheck does not build")
    config = AutoConfig.from_pretrained(str(folder))
    loads: dict = {}
    ns = _classes(root, loads)
    model = ns[arch](config)
    layers = list(model.layers)
    a0 = layers[0].self_attn
    rope = a0.rotary_emb  # RotaryEmbedding(head_size, rotary_dim, max_position, base, is_neox_style, dtype)
    dc = model.draft_config
    tensors = []
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            tensors += [(n, h.get_tensor(n)) for n in h.keys()]
    model.load_weights(iter(tensors))
    names = {p: n for n, p in model.named_parameters()}
    weights = {n: names[loads[id(t)][0]] if id(t) in loads else None for n, t in tensors}
    attn_type = ns["AttentionType"]
    return {
        "layers": [(l.self_attn.attn_type == attn_type.DECODER,
                    None if l.self_attn.sliding_window_size in (None, -1) else l.self_attn.sliding_window_size + 1)
                   for l in layers],
        "norms": norm_styles(layers, model, NORM_STYLES),
        "rope": (float(rope.args[3]), ROPE_TYPES.get(rope.kind, rope.kind), rope.args[1]),
        "qk_norm": all(hasattr(l.self_attn, "q_norm") and hasattr(l.self_attn, "k_norm") for l in layers),
        "rope_neox": rope.args[4],
        "mask_token_id": dc.mask_token_id,
        "target_layer_ids": captured(root, config, int(raw.get("num_target_layers") or max(dc.target_layer_ids) + 1)),
        "fc_in": model.fc.in_features,
        "block_size": dc.resolve_block_size(default=16),
        "value_scale": a0.v_scale,
        "hidden_act": config.hidden_act,
        "weights": weights,
    }



# ---- DFlash 2: DFlash2DraftModel built, every tensor through its load_weights -------------------


#: dflash.py's DFlash 2 classes (``EntryClass``): ``DFlash2DraftModel`` and its aliases with no body
DFLASH2 = ("DFlash2DraftModel", "MiniMaxDFlash2DraftModel", "DFlash2BeamDraftModel")
#: stacked parameters and the shards each needs (``DFlashDraftModel.load_weights``)
SHARDS = {"qkv_proj": {"q", "k", "v"}, "gate_up_proj": {0, 1}}


def _dflash2_names(s: Path) -> dict:
    """What dflash.py's DFlash 2 code imports, for :func:`_classes`: ``dflash_utils.py``
    ``is_dense_head_weight`` and ``layers/logits_processor.py``
    ``should_apply_lm_head_quant_method`` executed; stubs for the CUDA-only kernels."""
    utils = defs(s / "speculative/dflash_utils.py", ["_DENSE_HEAD_DTYPES", "is_dense_head_weight"], {"torch": torch})
    lp = defs(s / "layers/logits_processor.py", ["should_apply_lm_head_quant_method"], {"torch": torch})

    def cuda_only(name):
        def stub(*a, **k):
            raise AssertionError(f"STUB: {name} is CUDA-only; the CPU path must not call it")
        return stub

    return {
        "is_dense_head_weight": utils["is_dense_head_weight"],
        "should_apply_lm_head_quant_method": lp["should_apply_lm_head_quant_method"],
        "_flashinfer_top_k": None,  # dflash.py: flashinfer absent -> torch.topk
        "get_compiler_backend": lambda: "inductor",  # srt/utils/common.py (compilation disabled here)
        "selector_walk_triton": cuda_only("kernels/ops/speculative/dflash.py selector_walk_triton"),
        "lilicorr_topk_lse": cuda_only("kernels/ops/speculative/lilicorr.py lilicorr_topk_lse"),
        "tensor_model_parallel_all_gather": cuda_only("distributed tensor_model_parallel_all_gather (TP 1)"),
    }


def dflash2(folder: Path, target: str = "qwen3") -> dict:
    """What SGLang would run for the DFlash 2 drafter in ``folder`` (its ``architectures[0]``
    resolved through ``srt/models/*.py`` ``EntryClass``), every tensor through
    ``DFlashDraftModel.load_weights``: ``model`` (built, weights loaded; ``lm_head`` unset: the
    worker attaches the target's), ``arch``, ``conv`` {(taps, group_size, block)} over every
    convolution, ``selector`` (rank, top_k), ``unary`` (``draft_config`` multiplier, soft cap),
    ``layers`` [(causal, window)] (draftsmith's window convention, as :func:`read`),
    ``mask_token_id``, ``target_layer_ids`` (:func:`captured` on a ``target`` model),
    ``block_size``, ``input_embedding_scale`` (not read: 1), ``weights``
    {tensor: parameter[shard], or None: ignored}, ``unloaded`` (parameters no tensor reached)."""
    from transformers import AutoConfig

    root = src_root(SGLANG)
    raw = json.loads((Path(folder) / "config.json").read_text())
    arch = (raw.get("architectures") or ["?"])[0]
    f = model_file(root, arch)
    if f.name != "dflash.py" or arch not in DFLASH2:
        raise NotRead(f"{SGLANG} runs {arch} with srt/models/{f.name}, not a DFlash 2 class of dflash.py")
    config = AutoConfig.from_pretrained(str(folder))
    loads: dict = {}
    s = root / "sglang/srt"
    ns = _classes(root, loads, ("_grouped_conv", "DFlashGroupedConv", "_score_edges", "_follow_maps",
                                "CandidateSelector", "_radix_topk", "_project_candidate_logits", "candidate_topk",
                                *DFLASH2), _dflash2_names(s))
    model = ns[arch](config)
    weights, unloaded = load_and_account(model, folder, loads, SHARDS)
    layers = list(model.layers)
    convs = [c for l in layers for c in (l.attention_conv, l.mlp_conv)]
    dc = model.draft_config
    attn_type = ns["AttentionType"]
    return {
        "model": model, "arch": arch, "ns": ns,
        "conv": {None if c is None else (c.taps, c.group_size, c.block_size) for c in convs},
        "selector": (model.candidate_selector.predecessor_codebook.shape[1], model.candidate_selector.top_k),
        "unary": (dc.output_multiplier, dc.final_logit_softcapping),
        "layers": [(l.self_attn.attn_type == attn_type.DECODER,
                    None if l.self_attn.sliding_window_size in (None, -1) else l.self_attn.sliding_window_size + 1)
                   for l in layers],
        "mask_token_id": dc.mask_token_id,
        "target_layer_ids": captured(root, config, int(raw.get("num_target_layers") or max(dc.target_layer_ids) + 1),
                                     target),
        "block_size": dc.resolve_block_size(default=16),
        # dflash.py reads no input_embedding_scale: the worker scales the mask embeddings by the
        # target's get_dflash_noise_embedding_scale() only (dflash_worker_v2.py; no srt model has one)
        "input_embedding_scale": 1.0,
        "weights": weights, "unloaded": unloaded,
    }
