"""A ``tensorrt_llm`` package for the emit tests: TensorRT-LLM's own excerpts where
``$DRAFTSMITH_TRTLLM_SRC`` (default ``../shared/trtllm_src`` beside the checkout) has them, small
stand-ins for the rest.

Executed TensorRT-LLM text (through that folder's ``loader.py``): ``DFlashForCausalLM`` and
``GQADSparkForCausalLM`` (``__init__`` and the mask / window / refusal methods),
``WeightMode``, ``WeightsLoadingConfig``, ``LinearMethodBase.load_weights``'s dispatch,
``load_weights_vanilla_helper``'s assertions, ``filter_weights``, the fused-module branch of
``_load_weights_impl.load_single_module`` and the ``tie_word_embeddings`` block of
``DecoderModelForCausalLM.__init__``.

Stand-ins (each names what it reproduces, NVIDIA/TensorRT-LLM; never an attribute the real
class lacks): ``Mapping`` (tensorrt_llm/mapping.py: ``tp_rank = rank % tp_size`` at pp 1),
``Linear`` (``_torch/modules/linear.py``: COLUMN shards ``out_features``, ROW ``in_features``;
its fused loaders take each part's rank slice, ``load_weight_shard``), ``Embedding`` /
``LMHead`` (``_torch/modules/embedding.py`` @ 06d0733f: no TP mode under attention DP),
``RMSNorm`` (``_torch/modules/rms_norm.py``: ``(x, residual) -> (norm(x + residual), x +
residual)``; ``use_gemma``: ``1 + w``), ``RotaryEmbedding`` / ``RopeParams``
(``_torch/attention/rotary_embedding.py``; attributes only),
``DecoderModel`` / ``DecoderModelForCausalLM`` (``_torch/models/modeling_utils.py``: the LMHead
COLUMN unless attention DP, then the excerpt's tie block), the registries. The row-parallel
all-reduce is ``torch.distributed.all_reduce`` (gloo in the multi-process test).

Tests of the fake itself are at the bottom.
"""

from __future__ import annotations

import enum
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

SRC = Path(os.environ.get("DRAFTSMITH_TRTLLM_SRC", Path(__file__).resolve().parents[2] / "shared" / "trtllm_src"))
if not SRC.is_dir():  # the worktree layout: /work/wt/<name> beside /work/shared
    SRC = Path(__file__).resolve().parents[3] / "shared" / "trtllm_src"


def loader():
    if not (SRC / "loader.py").is_file():
        pytest.skip(f"TensorRT-LLM excerpts not found: set DRAFTSMITH_TRTLLM_SRC (looked in {SRC})")
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    import loader as ld

    return ld


class TensorParallelMode(str, enum.Enum):
    """STAND-IN: _torch/modules/linear.py TensorParallelMode (COLUMN, ROW)."""

    COLUMN = "column"
    ROW = "row"


class Mapping:
    """STAND-IN: tensorrt_llm/mapping.py Mapping (the fields the backbone reads; pp 1 rank math)."""

    def __init__(self, world_size=1, rank=0, gpus_per_node=8, tp_size=1, pp_size=1, cp_size=1,
                 enable_attention_dp=False, **_):
        self.world_size, self.rank, self.gpus_per_node = world_size, rank, gpus_per_node
        self.tp_size, self.pp_size, self.cp_size = tp_size, pp_size, cp_size
        self.enable_attention_dp = enable_attention_dp
        self.tp_rank = rank % tp_size
        self.pp_rank = rank // (tp_size * cp_size) if pp_size > 1 else 0
        self.cp_config = {}

    def is_last_pp_rank(self):
        return self.pp_rank == self.pp_size - 1


def build(trt_version="1.4.0rc4"):
    """``(modules, ns)``: the ``tensorrt_llm`` module tree (name -> module) and handles."""
    ld = loader()
    mu_ns = ld.modeling_utils()
    cu = ld.config_utils()
    df = ld.dflash(cu)
    ds = ld.dspark(cu, df)
    WeightMode, WeightsLoadingConfig = mu_ns["WeightMode"], mu_ns["WeightsLoadingConfig"]
    base_method = mu_ns["UnquantizedLinearMethod"]

    def shard(t, mode, tp_size, tp_rank):
        if tp_size == 1 or mode is None:
            return t
        dim = 0 if mode == TensorParallelMode.COLUMN else 1
        size = -(-t.shape[dim] // tp_size)
        return t.narrow(dim, tp_rank * size, min(size, t.shape[dim] - tp_rank * size))

    class Method(base_method):
        """The excerpt's dispatch (LinearMethodBase.load_weights); the copies shard as
        load_weight_shard does (COLUMN: rows, ROW: columns of the rank)."""

        def load_weights_vanilla(self, module, weights, allow_partial_loading=False):
            assert len(weights) == 1  # as load_weights_vanilla_helper asserts (it then moves to CUDA)
            assert module.bias is None or "bias" in weights[0]  # likewise
            module.weight.data.copy_(shard(weights[0]["weight"], module.tp_mode, module.tp_size, module.tp_rank))
            if module.bias is not None:
                module.bias.data.copy_(weights[0]["bias"])

        def _fused(self, module, weights):
            parts = [shard(w["weight"], module.tp_mode, module.tp_size, module.tp_rank) for w in weights]
            module.weight.data.copy_(torch.cat(parts, 0))
            if module.bias is not None:  # each part's bias, concatenated like the weight rows
                module.bias.data.copy_(torch.cat([w["bias"] for w in weights], 0))

        def load_weights_fused_qkv_linear(self, module, weights, allow_partial_loading=False):
            assert len(weights) == 3
            self._fused(module, weights)

        def load_weights_fused_gate_up_linear(self, module, weights, allow_partial_loading=False):
            assert len(weights) == 2
            self._fused(module, weights)

    mu_ns["UnquantizedLinearMethod"] = Method  # the excerpt's isinstance check names it

    def dup_kv(weight, num_kv_heads, tensor_parallel_size):
        """STAND-IN: linear.py duplicate_kv_weight (repeat each KV head tp/nkv times)."""
        if num_kv_heads >= tensor_parallel_size:
            return weight
        reps = tensor_parallel_size // num_kv_heads
        head_dim = weight.shape[0] // num_kv_heads
        w = weight.reshape(num_kv_heads, head_dim, -1)
        return w.repeat_interleave(reps, 0).reshape(num_kv_heads * reps * head_dim, -1)

    mu_ns["duplicate_kv_weight"] = dup_kv

    class Linear(nn.Module):
        """STAND-IN: _torch/modules/linear.py Linear (CPU weights; per-rank shapes)."""

        def __init__(self, in_features, out_features, bias=True, dtype=None, mapping=None, tensor_parallel_mode=None,
                     gather_output=False, weights_loading_config=None, reduce_output=True, **_):
            super().__init__()
            mapping = mapping or Mapping()
            self.mapping, self.tp_size, self.tp_rank = mapping, mapping.tp_size, mapping.tp_rank
            self.tp_mode = tensor_parallel_mode
            self.in_features, self.out_features = in_features, out_features
            if tensor_parallel_mode == TensorParallelMode.COLUMN:
                self.out_features = out_features // self.tp_size
            elif tensor_parallel_mode == TensorParallelMode.ROW:
                self.in_features = in_features // self.tp_size
            self.weights_loading_config = weights_loading_config or WeightsLoadingConfig()
            self.gather_output, self.reduce_output = gather_output, reduce_output
            self.weight = nn.Parameter(torch.zeros(self.out_features, self.in_features, dtype=dtype),
                                       requires_grad=False)
            # bias [out_features] (per rank); the stand-in carries one at TP 1 only (how a sharded
            # bias is split and where a ROW bias is added is not transcribed here)
            if bias and self.tp_size > 1:
                raise NotImplementedError("stand-in: a Linear bias at tp_size > 1")
            self.bias = nn.Parameter(torch.zeros(self.out_features, dtype=dtype), requires_grad=False) if bias else None
            self.quant_method = Method()

        def load_weights(self, weights, allow_partial_loading=False):
            self.quant_method.load_weights(self, weights, self.weights_loading_config.weight_mode,
                                           allow_partial_loading=allow_partial_loading)

        def forward(self, x, all_reduce_params=None, **_):
            y = F.linear(x, self.weight, self.bias)
            if self.tp_size > 1 and self.tp_mode == TensorParallelMode.ROW and self.reduce_output:
                if not torch.distributed.is_initialized():
                    raise NotImplementedError("stand-in: the row-parallel all-reduce needs torch.distributed")
                torch.distributed.all_reduce(y)  # AllReduce inside the ROW Linear (linear.py)
            return y

    class LMHead(Linear):
        """STAND-IN: embedding.py LMHead (no TP mode under attention DP)."""

        def __init__(self, num_embeddings, embedding_dim, dtype=None, mapping=None, tensor_parallel_mode=None,
                     gather_output=False, **_):
            mapping = mapping or Mapping()
            if mapping.enable_attention_dp:
                tensor_parallel_mode = None
            super().__init__(embedding_dim, num_embeddings, bias=False, dtype=dtype, mapping=mapping,
                             tensor_parallel_mode=tensor_parallel_mode, gather_output=gather_output)

    class Embedding(LMHead):
        """STAND-IN: embedding.py Embedding (forward at tp 1)."""

        def forward(self, ids):
            return F.embedding(ids, self.weight)

    class RMSNorm(nn.Module):
        """STAND-IN: rms_norm.py RMSNorm."""

        def __init__(self, *, hidden_size, eps, dtype=None, use_gemma=False, **_):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype), requires_grad=False)
            self.variance_epsilon, self.use_gemma = eps, use_gemma

        def forward(self, x, residual=None):
            if residual is not None:
                x = x + residual
                residual = x
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
            w = self.weight.float()
            y = (y * (1 + w if self.use_gemma else w)).to(x.dtype)
            return y if residual is None else (y, residual)

    @dataclass(kw_only=True)
    class RopeParams:
        """STAND-IN: RopeParams as _torch/attention/rotary_embedding.py imports it (fields the backbone passes)."""

        dim: int = 0
        theta: float = 10000.0
        max_positions: int = 1024

    class RotaryEmbedding(nn.Module):
        """STAND-IN: _torch/attention/rotary_embedding.py RotaryEmbedding (attributes _init_rope reads)."""

        def __init__(self, rope_params, *, head_dim, is_neox=True):
            super().__init__()
            self.rope_params, self.head_dim, self.is_neox = rope_params, head_dim, is_neox

    MODEL_CLASS_MAPPING, BUILDERS = {}, {}

    def register_auto_model(name):
        def deco(cls):
            MODEL_CLASS_MAPPING[name] = cls
            return cls
        return deco

    def get_registered_model_class(arch):
        return MODEL_CLASS_MAPPING.get(arch)

    def register_draft_model(mode):
        def deco(fn):
            BUILDERS[mode] = fn
            return fn
        return deco

    def get_registered_draft_model_builder(mode):
        return BUILDERS.get(mode)

    def get_model_architecture(pretrained_config):
        archs = getattr(pretrained_config, "architectures", None)
        if not archs:
            raise RuntimeError("Model architecture is not provided.")
        cls = MODEL_CLASS_MAPPING.get(archs[0])
        if cls is None:
            raise RuntimeError(f"Unknown model architecture: {archs[0]}")
        return cls, archs[0]

    df["get_model_architecture"] = get_model_architecture  # the excerpt's __init__ resolves through it
    REGISTERED = ld.REGISTERED
    BUILDERS.update(REGISTERED)  # TensorRT-LLM's own DFlash/DSpark builders (the excerpts registered them)

    class DecoderModel(nn.Module):
        """STAND-IN: modeling_utils.py DecoderModel (holds model_config)."""

        def __init__(self, model_config):
            super().__init__()
            self.model_config = model_config

    class DecoderModelForCausalLM(nn.Module):
        """STAND-IN: modeling_utils.py DecoderModelForCausalLM.__init__ (LMHead COLUMN unless attention
        DP, then the excerpt's tie block) and load_weights (the excerpt's fused branch for
        qkv_proj / gate_up_proj, the vanilla path for the rest)."""

        def __init__(self, model, *, config, hidden_size, vocab_size):
            super().__init__()
            self.model_config, self.model = config, model
            dtype = getattr(config.pretrained_config, "torch_dtype", None)
            dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
            if config.mapping.enable_attention_dp:
                self.lm_head = LMHead(vocab_size, hidden_size, dtype=dtype)
            else:
                self.lm_head = LMHead(vocab_size, hidden_size, dtype=dtype, mapping=config.mapping,
                                      tensor_parallel_mode=TensorParallelMode.COLUMN,
                                      gather_output=config.lm_head_gather_output)
            mu_ns["_tie_block_of_decoder_model_for_causal_lm_init"](self, config)

        def load_weights(self, weights, weight_mapper=None, allow_partial_loading=False):
            params_map = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
            pc = self.model_config.pretrained_config
            nkv = getattr(pc, "num_key_value_heads", None) or pc.num_attention_heads
            tp = 1 if self.model_config.mapping.enable_attention_dp else self.model_config.mapping.tp_size
            for name, module in self.named_modules():
                if name.split(".")[-1] in params_map:
                    mu_ns["_fused_branch_of_load_single_module"](name, module, weights, params_map, nkv, tp,
                                                                 allow_partial_loading)
                elif isinstance(module, (Linear, RMSNorm)) and f"{name}.weight" in weights:
                    w = weights[f"{name}.weight"]
                    if isinstance(module, Linear):  # the excerpt's filter_weights: weight (and bias)
                        module.load_weights([mu_ns["filter_weights"](name, weights)])
                    else:
                        module.weight.data.copy_(w)

    SpeculativeDecodingMode = ld.SpeculativeDecodingMode

    def mod(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        return m

    modules = {
        "tensorrt_llm": mod("tensorrt_llm", __version__=trt_version, __path__=[]),
        "tensorrt_llm.mapping": mod("tensorrt_llm.mapping", Mapping=Mapping),
        "tensorrt_llm._torch": mod("tensorrt_llm._torch", __path__=[]),
        "tensorrt_llm._torch.models": mod("tensorrt_llm._torch.models", __path__=[]),
        "tensorrt_llm._torch.modules": mod("tensorrt_llm._torch.modules", __path__=[]),
        "tensorrt_llm._torch.attention": mod("tensorrt_llm._torch.attention", __path__=[]),
        "tensorrt_llm._torch.speculative": mod("tensorrt_llm._torch.speculative", __path__=[]),
        "tensorrt_llm._torch.models.modeling_utils": mod(
            "tensorrt_llm._torch.models.modeling_utils", DecoderModel=DecoderModel,
            DecoderModelForCausalLM=DecoderModelForCausalLM, register_auto_model=register_auto_model,
            register_draft_model=register_draft_model, get_registered_model_class=get_registered_model_class,
            get_registered_draft_model_builder=get_registered_draft_model_builder,
            MODEL_CLASS_MAPPING=MODEL_CLASS_MAPPING),
        "tensorrt_llm._torch.models.modeling_dflash": mod("tensorrt_llm._torch.models.modeling_dflash",
                                                          DFlashForCausalLM=df["DFlashForCausalLM"]),
        "tensorrt_llm._torch.models.modeling_dspark": mod("tensorrt_llm._torch.models.modeling_dspark",
                                                          GQADSparkForCausalLM=ds["GQADSparkForCausalLM"]),
        "tensorrt_llm._torch.speculative.interface": mod("tensorrt_llm._torch.speculative.interface",
                                                         SpeculativeDecodingMode=SpeculativeDecodingMode),
        "tensorrt_llm._torch.modules.linear": mod("tensorrt_llm._torch.modules.linear", Linear=Linear,
                                                  TensorParallelMode=TensorParallelMode, WeightMode=WeightMode,
                                                  WeightsLoadingConfig=WeightsLoadingConfig),
        "tensorrt_llm._torch.modules.embedding": mod("tensorrt_llm._torch.modules.embedding", Embedding=Embedding,
                                                     LMHead=LMHead),
        "tensorrt_llm._torch.modules.rms_norm": mod("tensorrt_llm._torch.modules.rms_norm", RMSNorm=RMSNorm),
        "tensorrt_llm._torch.attention.rotary_embedding": mod("tensorrt_llm._torch.attention.rotary_embedding",
                                                              RotaryEmbedding=RotaryEmbedding, RopeParams=RopeParams),
    }
    ns = types.SimpleNamespace(ld=ld, mu_ns=mu_ns, df=df, ds=ds, Linear=Linear, Mapping=Mapping, TP=TensorParallelMode,
                               WeightMode=WeightMode, MODEL_CLASS_MAPPING=MODEL_CLASS_MAPPING, BUILDERS=BUILDERS,
                               ModelConfig=ld.ModelConfig, Mode=SpeculativeDecodingMode, dup_kv=dup_kv)
    return modules, ns


def install_modules(modules) -> None:
    """Put the fake in ``sys.modules`` for good (a spawned test process)."""
    for name in [n for n in sys.modules if n == "tensorrt_llm" or n.startswith("tensorrt_llm.")]:
        del sys.modules[name]
    sys.modules.update(modules)


@pytest.fixture
def fake_trtllm(monkeypatch):
    """Installs the fake ``tensorrt_llm`` in ``sys.modules`` for one test; yields the handles."""
    from draftsmith.framework.emit import runtime

    modules, ns = build()
    for name in [n for n in sys.modules if n == "tensorrt_llm" or n.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name)
    for name, m in modules.items():
        monkeypatch.setitem(sys.modules, name, m)
    monkeypatch.setattr(runtime, "_INSTALLED", {})
    yield ns


# ------------------------------------------------------------------------- tests of the fake


def test_fake_linear_shards_and_the_excerpt_dispatches_fused_modes(fake_trtllm):
    ns = fake_trtllm
    m = ns.Mapping(world_size=2, rank=1, tp_size=2)
    lin = ns.Linear(4, 6, bias=False, mapping=m, tensor_parallel_mode=ns.TP.COLUMN)
    assert lin.weight.shape == (3, 4)
    w = torch.arange(24.0).view(6, 4)
    lin.load_weights([{"weight": w}])
    assert torch.equal(lin.weight, w[3:])
    with pytest.raises(AssertionError):  # a VANILLA module handed q, k, v (issue 34 item 3)
        lin.load_weights([{"weight": w}] * 3)
