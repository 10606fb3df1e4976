"""The generated backbone: a drafter's layers out of TensorRT-LLM's own modules, sharded by the
target's mapping as TensorRT-LLM's own backbones shard.

Imported only inside TensorRT-LLM (by an emitted package); :func:`backbone_class` imports
``tensorrt_llm`` when called. Written from TensorRT-LLM's source (NVIDIA/TensorRT-LLM):

- ``_torch/modules/attention.py`` @ 00547a25ac61d28d1dabb2e47383a1af605ebb59, ``Attention.__init__``:
  under attention DP ``tp_size = 1`` and ``pp_size *= dp_size``; heads per rank
  ``num_heads // tp_size``, KV heads ``(num_kv_heads + tp_size - 1) // tp_size``;
  ``qkv_proj = Linear(hidden, tp*q_size + 2*tp*kv_size, mapping=<attention mapping>,
  tensor_parallel_mode=COLUMN, weights_loading_config=WeightsLoadingConfig(weight_mode=
  FUSED_QKV_LINEAR))``; ``o_proj = Linear(tp*q_size, hidden, tensor_parallel_mode=ROW)``
  (the all-reduce runs inside the ROW Linear); ``rotary_emb = RotaryEmbedding(rope, head_dim=,
  is_neox=)`` (read by ``DFlashForCausalLM._init_rope``, amukkara d70a2287, for the context K
  its ``precompute_context_kv`` ropes);
- ``_torch/modules/gated_mlp.py`` @ 01503f5535c0379da60bfd282d225626813781ab, ``GatedMLP.__init__``:
  ``gate_up_proj`` COLUMN with ``FUSED_GATE_UP_LINEAR``, ``down_proj`` ROW, over
  ``Mapping(world_size=tp*pp, rank, gpus_per_node, tp_size, pp_size)`` (``overridden_tp_size=1``
  under attention DP: ``tp_size 1``, ``pp_size pp*tp``). The activation is the drafter's
  (``swiglu`` or ``swiglu_oai``), computed here, since GatedMLP's forward runs only SiLU;
- ``_torch/models/modeling_qwen3.py`` @ 010bb95fbad3c678792a9edf659970299a1a320b, ``Qwen3Model``:
  ``Embedding(vocab, hidden, dtype=, mapping=config.mapping, tensor_parallel_mode=COLUMN,
  gather_output=True)``; under attention DP unsharded (no mapping, no mode), as
  ``DecoderModelForCausalLM.__init__`` builds ``lm_head`` there (``LMHead(vocab, hidden,
  dtype=)``), so the tie block's TP size / mode assertions hold in both layouts;
- ``_torch/models/modeling_utils.py``: ``DecoderModel``, ``DecoderModelForCausalLM(model, *,
  config, hidden_size, vocab_size)``, ``register_auto_model``.

Context parallelism (``cp_size > 1``) is refused in one line.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn


def _trt(module: str):
    return importlib.import_module(module)


def per_rank(heads: int, kv_heads: int, mapping: Any) -> tuple[int, int, int]:
    """``(tp_size, heads_per_rank, kv_heads_per_rank)`` as ``Attention.__init__`` computes them."""
    tp = 1 if getattr(mapping, "enable_attention_dp", False) else mapping.tp_size
    if heads % tp:
        raise ValueError(f"num_attention_heads {heads} is not divisible by tp_size {tp}")
    return tp, heads // tp, (kv_heads + tp - 1) // tp


def qkv_shard_indices(q_size: int, kv_size: int) -> dict[str, tuple[int, int]]:
    """``{shard: (offset, rows)}`` of q, k, v in one rank's fused ``qkv_proj`` weight, as
    ``Attention.__init__`` passes it (``qkv_shard_indices_mapping``; sizes are per rank). TensorRT-LLM's
    fused loader needs it whenever it loads with ``allow_partial_loading``, which
    ``DFlashForCausalLM.load_weights`` always does."""
    return {"q": (0, q_size), "k": (q_size, kv_size), "v": (q_size + kv_size, kv_size)}


def gate_up_shard_indices(intermediate: int, tp_size: int) -> dict[str, tuple[int, int]]:
    """``{shard: (offset, rows)}`` of gate and up in one rank's fused ``gate_up_proj`` weight (rows per
    rank ``intermediate // tp_size``), the layout ``load_weights_fused_gate_up_helper`` concatenates and
    the one ``GatedMLP.__init__`` passes where it passes any (``gateup_shard_indices_mapping``, amukkara
    ``gated_mlp.py`` @ e4dc0e3c; the stored NVIDIA versions @ 01503f55 / 90f3bec1 pass none). An
    intermediate size the TP size does not divide is refused (TensorRT-LLM's uneven split is not built)."""
    if intermediate % tp_size:
        raise ValueError(f"intermediate_size {intermediate} is not divisible by tp_size {tp_size}")
    rows = intermediate // tp_size
    return {"gate": (0, rows), "up": (rows, rows)}


def attention_mapping(mapping: Any):
    """The Mapping ``Attention.__init__`` builds for its qkv/o projections."""
    Mapping = _trt("tensorrt_llm.mapping").Mapping
    if getattr(mapping, "cp_size", 1) != 1:
        raise ValueError(f"context parallelism (cp_size {mapping.cp_size}) is not supported by the draftsmith backbone")
    tp, pp = mapping.tp_size, mapping.pp_size
    dp = 1
    if mapping.enable_attention_dp:
        dp, tp = tp, 1
    return Mapping(world_size=dp * tp * pp, tp_size=tp, pp_size=pp * dp, rank=mapping.rank,
                   gpus_per_node=mapping.gpus_per_node, enable_attention_dp=mapping.enable_attention_dp)


def mlp_mapping(mapping: Any):
    """The Mapping ``GatedMLP.__init__`` builds (``overridden_tp_size=1`` under attention DP)."""
    Mapping = _trt("tensorrt_llm.mapping").Mapping
    tp, pp = mapping.tp_size, mapping.pp_size
    if mapping.enable_attention_dp:
        tp, pp = 1, pp * mapping.tp_size
    return Mapping(world_size=tp * pp, rank=mapping.rank, gpus_per_node=mapping.gpus_per_node, tp_size=tp,
                   pp_size=pp)


def backbone_class(architecture: str, drafter: Any, module_name: str = __name__):
    """The ``DecoderModelForCausalLM`` subclass for ``drafter`` (a :class:`PackagedDrafter`),
    registered under ``architecture``; its ``__module__`` is ``module_name`` (the emitted module)."""
    mu = _trt("tensorrt_llm._torch.models.modeling_utils")
    lin = _trt("tensorrt_llm._torch.modules.linear")
    Linear, TP, WeightMode, WLC = lin.Linear, lin.TensorParallelMode, lin.WeightMode, lin.WeightsLoadingConfig
    Embedding = _trt("tensorrt_llm._torch.modules.embedding").Embedding
    RMSNorm = _trt("tensorrt_llm._torch.modules.rms_norm").RMSNorm
    rotary = _trt(ROTARY_MODULE)
    RotaryEmbedding, RopeParams = rotary.RotaryEmbedding, rotary.RopeParams

    def norm(r, kind, size, dtype):
        return RMSNorm(hidden_size=size, eps=r.rms_norm_eps, dtype=dtype, use_gemma=r.norms[kind] == "gemma")

    class DraftsmithAttention(nn.Module):
        """What ``DFlashForCausalLM`` reads of ``self_attn`` (fused ``qkv_proj``, sizes per rank,
        ``q_norm``/``k_norm``, ``rotary_emb``/``pos_embd_params``), built as ``Attention`` builds it.
        ``attention_bias``: ``qkv_proj`` and ``o_proj`` carry biases (``Linear(bias=True)``; the fused
        loader takes each of q/k/v's ``bias``; ``_build_fused_kv_buffers`` stacks ``qkv_proj.bias``).
        Without q/k norms (``qk_norm`` false) the attributes are absent, as ``_build_fused_kv_buffers``
        (amukkara d70a2287) reads ``hasattr(self_attn, "k_norm")`` to set ``_has_qk_norm``."""

        def __init__(self, r, model_config, max_positions):
            super().__init__()
            d, dtype = r.dims, r.torch_dtype
            self.mapping = model_config.mapping
            tp, self.num_heads, self.num_key_value_heads = per_rank(d.heads, d.kv_heads, self.mapping)
            self.tp_size = tp
            self.head_dim = d.head_dim
            self.q_size, self.kv_size = self.num_heads * d.head_dim, self.num_key_value_heads * d.head_dim
            amap = attention_mapping(self.mapping)
            self.qkv_proj = Linear(d.hidden, tp * self.q_size + 2 * tp * self.kv_size, bias=r.attention_bias,
                                   dtype=dtype,
                                   mapping=amap, tensor_parallel_mode=TP.COLUMN,
                                   weights_loading_config=WLC(weight_mode=WeightMode.FUSED_QKV_LINEAR),
                                   fused_weight_shard_indices_mapping=qkv_shard_indices(self.q_size, self.kv_size))
            self.o_proj = Linear(tp * self.q_size, d.hidden, bias=r.attention_bias, dtype=dtype, mapping=amap,
                                 tensor_parallel_mode=TP.ROW)
            if r.qk_norm:  # absent, not None: DFlashForCausalLM tests hasattr(self_attn, "k_norm")
                self.q_norm = norm(r, "q_norm", d.head_dim, dtype)
                self.k_norm = norm(r, "k_norm", d.head_dim, dtype)
            rope = RopeParams(dim=d.rotary_dim, theta=r.rope.theta, max_positions=max_positions)
            self.pos_embd_params = None
            self.rotary_emb = RotaryEmbedding(rope, head_dim=d.head_dim, is_neox=True)

    class DraftsmithMLP(nn.Module):
        """``gate_up_proj`` (fused, COLUMN) and ``down_proj`` (ROW) as ``GatedMLP`` builds them;
        the drafter's activation (drafter reference section 1)."""

        def __init__(self, r, model_config):
            super().__init__()
            d, m, dtype = r.dims, r.mlp, r.torch_dtype
            mmap = mlp_mapping(model_config.mapping)
            self.kind, self.alpha, self.limit = m.kind, m.alpha, m.limit
            self.gate_up_proj = Linear(d.hidden, 2 * d.intermediate, bias=r.mlp_bias, dtype=dtype, mapping=mmap,
                                       tensor_parallel_mode=TP.COLUMN,
                                       weights_loading_config=WLC(weight_mode=WeightMode.FUSED_GATE_UP_LINEAR),
                                       fused_weight_shard_indices_mapping=gate_up_shard_indices(
                                           d.intermediate, mmap.tp_size))
            self.down_proj = Linear(d.intermediate, d.hidden, bias=r.mlp_bias, dtype=dtype, mapping=mmap,
                                    tensor_parallel_mode=TP.ROW)

        def forward(self, x):
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            if self.kind == "swiglu_oai":
                g = gate.clamp(max=self.limit)
                u = up.clamp(-self.limit, self.limit)
                h = g * torch.sigmoid(self.alpha * g) * (u + 1)
            else:
                h = torch.nn.functional.silu(gate) * up
            return self.down_proj(h)

    class DraftsmithDecoderLayer(nn.Module):
        def __init__(self, r, model_config, max_positions):
            super().__init__()
            d, dtype = r.dims, r.torch_dtype
            self.input_layernorm = norm(r, "input_layernorm", d.hidden, dtype)
            self.self_attn = DraftsmithAttention(r, model_config, max_positions)
            self.post_attention_layernorm = norm(r, "post_attention_layernorm", d.hidden, dtype)
            self.mlp = DraftsmithMLP(r, model_config)

    class DraftsmithModel(mu.DecoderModel):
        def __init__(self, r, model_config, max_positions):
            super().__init__(model_config)
            d, dtype = r.dims, r.torch_dtype
            if model_config.mapping.enable_attention_dp:  # unsharded, as DecoderModelForCausalLM's lm_head
                self.embed_tokens = Embedding(d.vocab, d.hidden, dtype=dtype)
            else:
                self.embed_tokens = Embedding(d.vocab, d.hidden, dtype=dtype, mapping=model_config.mapping,
                                              tensor_parallel_mode=TP.COLUMN, gather_output=True)
            self.layers = nn.ModuleList([DraftsmithDecoderLayer(r, model_config, max_positions)
                                         for _ in range(d.num_layers)])
            self.norm = norm(r, "norm", d.hidden, dtype)

    class DraftsmithBackbone(mu.DecoderModelForCausalLM):
        """The drafter's layers under its architecture (``DFlashForCausalLM.__init__`` builds it
        through ``get_model_architecture``)."""

        def __init__(self, model_config):
            config = model_config.pretrained_config
            r = drafter.bind(config).resolved
            max_positions = rope_positions(config)
            super().__init__(DraftsmithModel(r, model_config, max_positions), config=model_config,
                             hidden_size=r.dims.hidden, vocab_size=r.dims.vocab)

    DraftsmithBackbone.__module__ = module_name
    return mu.register_auto_model(architecture)(DraftsmithBackbone)


#: Where the pinned DFlashForCausalLM imports RotaryEmbedding from (amukkara modeling_dflash.py @
#: d70a2287); the module also imports RopeParams in both layouts (NVIDIA
#: _torch/attention/rotary_embedding.py @ 047098b7 and @ b744e0a5).
ROTARY_MODULE = "tensorrt_llm._torch.attention.rotary_embedding"
#: RoPE table rows when the config has no max_position_embeddings.
ROPE_TABLE_POSITIONS = 262144


def rope_positions(config: Any) -> int:
    """Rows of the drafter's RoPE tables (the backbone's and ``dflash_forward``'s): the converted
    config's ``max_position_embeddings`` (an attribute, or a key of a dict), else
    :data:`ROPE_TABLE_POSITIONS`; a position at or past it cannot be roped."""
    value = config.get("max_position_embeddings") if isinstance(config, dict) else \
        getattr(config, "max_position_embeddings", None)
    return value or ROPE_TABLE_POSITIONS
