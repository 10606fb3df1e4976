"""Stand-in of ``tensorrt_llm._torch.models.modeling_dflash`` (amukkara/TensorRT-LLM @
d70a22876d5b0b13dcd5fee18e6dba2331c000a6). CPU, float32, batch of requests in one pool.

DFlash 2: ``DFlash2BlockConv``, ``DFlash2CandidateSelector`` and the class's
``_validate_dflash2_config`` / ``is_dflash2`` / ``has_block_conv`` / ``has_candidate_selector`` /
``select_candidate_path`` are the transcriptions in ``tests/upstream/trtllm/trtllm_dflash2.py`` (same
commit), loaded from there; ``__init__``'s DFlash 2 detection, ``load_weights``' DFlash 2 branch,
``_load_dflash2_weights`` and the convolutions' placement in ``dflash_forward`` are transcribed
below (weights kept on the CPU in float32, where the real one moves them to CUDA as stored)."""

import importlib.util
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from tensorrt_llm.logger import logger

from ..pinned_gate import OLD
from ..pyexecutor.config_utils import _is_sliding_attention_layer, get_layer_attention_window
from ..speculative.dflash_attention import (
    get_dflash_fa4_fwd,
    get_dflash_flash_attention,
    get_dflash_paged_append,
    get_dflash_trtllm_gen_ops,
    get_dflash_xqa_decode,
)
from ..speculative.interface import SpeculativeDecodingMode
from ..attention.rotary_embedding import RotaryEmbedding
from .modeling_utils import get_model_architecture

if not OLD:
    from .modeling_utils import register_draft_model


def _load_dflash2_transcription():
    path = Path(__file__).resolve().parents[4] / "trtllm_dflash2.py"  # tests/upstream/trtllm/
    spec = importlib.util.spec_from_file_location("_trtllm_dflash2_transcription", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_D2 = _load_dflash2_transcription()
_is_dflash2_architecture = _D2._is_dflash2_architecture
DFlash2BlockConv, DFlash2CandidateSelector = _D2.DFlash2BlockConv, _D2.DFlash2CandidateSelector
dflash2_walk_candidate_paths = _D2.dflash2_walk_candidate_paths


def dspark_layer_window_size(use_swa, swa_window, layer_types, layer_idx):
    """Reproduces modeling_dflash.py @ d70a2287 ``dspark_layer_window_size``: ``(W-1, W-1)`` for a
    ``sliding_attention`` layer (or any layer without ``layer_types``) when ``use_swa``, else
    ``(-1, -1)``."""
    if not use_swa:
        return (-1, -1)
    if layer_types is not None and layer_idx < len(layer_types) and layer_types[layer_idx] != "sliding_attention":
        return (-1, -1)
    return (swa_window - 1, swa_window - 1)


class DFlashForCausalLM(_D2.DFlashForCausalLM):
    """Reproduces modeling_dflash.py @ d70a2287 ``DFlashForCausalLM``: ``__init__`` (backbone from
    the registry with the model_type-derived fallback name, ``dflash_config`` reads,
    ``AUTO`` -> ``VANILLA``, backends ``VANILLA|TRTLLM|FA4|XQA`` (each loading only its own ops;
    no device checks), ``_layer_windows``, ``_warn_inferred_attention_windows``), ``load_weights``,
    ``load_weights_from_target_model``, ``precompute_context_kv`` (one fused K/V GEMM, k_norm
    applied PLAINLY as ``rms(k) * w`` from the stacked weights, whatever the layer's k_norm
    flag), ``_get_attention_mask_args``, ``_resolve_block_attention``,
    ``validate_block_attention_windows`` and ``dflash_forward`` (the generic non-fused path:
    per-layer ``q_norm``/``k_norm`` modules, RoPE from layer 0's cos/sin cache).
    """

    _supported_attention_backends = ("VANILLA", "TRTLLM", "FA4", "XQA")
    WRAPPER_OWNED_WEIGHTS = ("fc.weight", "hidden_norm.weight")

    def __init__(self, draft_config, *, dflash_attention_backend: str = "AUTO"):
        super().__init__()
        pcfg = draft_config.pretrained_config
        try:
            cls, _ = get_model_architecture(pcfg)
        except RuntimeError:
            arch = "".join(w.capitalize() for w in pcfg.model_type.split("_")) + "ForCausalLM"
            logger.info(f"DFlash: architecture {pcfg.architectures} not found, falling back to {arch}")
            orig = pcfg.architectures
            try:
                pcfg.architectures = [arch]
                cls, _ = get_model_architecture(pcfg)
            finally:
                pcfg.architectures = orig
        nospec = replace(draft_config, spec_config=None, lm_head_gather_output=False)
        self.draft_model_full = cls(nospec)
        self.model = self.draft_model_full.model
        self.lm_head = self.draft_model_full.lm_head
        self.model_config = nospec
        self.config = nospec.pretrained_config
        dcfg = getattr(pcfg, "dflash_config", {})
        self.mask_token_id = dcfg.get("mask_token_id", getattr(pcfg, "mask_token_id", pcfg.vocab_size))
        self.target_layer_ids = dcfg.get("target_layer_ids", None)
        self.block_size = dcfg.get("block_size", getattr(pcfg, "block_size", None))
        if dflash_attention_backend == "AUTO":
            dflash_attention_backend = "VANILLA"
        if dflash_attention_backend not in self._supported_attention_backends:
            raise ValueError(f"{type(self).__name__} attention backend must be one of "
                             f"{list(self._supported_attention_backends)}, got {dflash_attention_backend!r}.")
        self.dflash_attention_backend = b = dflash_attention_backend
        self._dflash_flash_attention = get_dflash_flash_attention() if b == "VANILLA" else None
        self._dflash_trtllm_gen_ops = get_dflash_trtllm_gen_ops() if b == "TRTLLM" else None
        self._dflash_fa4_fwd = get_dflash_fa4_fwd() if b == "FA4" else None
        self._dflash_xqa_decode = get_dflash_xqa_decode() if b == "XQA" else None
        self._dflash_paged_append = get_dflash_paged_append() if b in ("FA4", "XQA") else None
        self._use_swa = bool(dcfg.get("use_swa", False))
        self._swa_window = int(dcfg.get("swa_window_size", 0) or 0)
        if self._use_swa and self._swa_window < 1:
            raise ValueError("DFlash drafter sets use_swa but swa_window_size is invalid.")
        n = getattr(pcfg, "num_hidden_layers", 0)
        types = getattr(pcfg, "layer_types", None)
        self._layer_windows = [dspark_layer_window_size(self._use_swa, self._swa_window, types, i) for i in range(n)]
        self._dflash2_conv_taps = int(dcfg.get("conv_kernel_size", 0) or 0)
        self._dflash2_conv_group_size = int(dcfg.get("conv_group_size", 0) or 0)
        self._dflash2_selector_rank = int(dcfg.get("selector_rank", 0) or 0)
        self._dflash2_selector_top_k = int(dcfg.get("selector_top_k", 0) or 0)
        self._is_dflash2 = (self._dflash2_conv_taps > 0 or self._dflash2_selector_rank > 0
                            or _is_dflash2_architecture(pcfg))
        if self._is_dflash2:
            self._validate_dflash2_config()
        self.attention_convs = None
        self.mlp_convs = None
        self.candidate_selector = None
        self._sliding_layers_causal = False
        self._fused_kv_weight = None
        self._rotary_cos_sin = None
        self._validate_gqa_shape()
        self._warn_inferred_attention_windows()

    # -- shape / rope -------------------------------------------------------------------
    def _validate_gqa_shape(self):
        for idx, layer in enumerate(self.model.layers):
            if not hasattr(getattr(layer, "self_attn", None), "qkv_proj"):
                raise ValueError(f"DFlash block decode requires a fused self_attn.qkv_proj on every draft layer ({idx})")

    def _init_rope(self):
        sigs = [(a.rotary_emb.rope_params, a.rotary_emb.head_dim) for a in (l.self_attn for l in self.model.layers)]
        if any(s != sigs[0] for s in sigs[1:]):
            raise ValueError("DFlash shares one RoPE cache across draft layers")
        attn0 = self.model.layers[0].self_attn
        self._rotary_cos_sin = attn0.rotary_emb.rotary_cos_sin
        self._is_neox = attn0.rotary_emb.is_neox

    def _rope(self, x, positions):
        """x [..., T, H, D] rotated at ``positions`` [T] with layer 0's cache (first R dims)."""
        if self._rotary_cos_sin is None:
            self._init_rope()
        cs = self._rotary_cos_sin[positions.long()]
        return RotaryEmbedding.apply_rotary_pos_emb(x, cs[..., 0, :], cs[..., 1, :], unsqueeze_dim=-2)

    # -- weights ------------------------------------------------------------------------
    def project_target_hidden(self, hidden_states):
        return self.hidden_norm(self.fc(hidden_states.float()))

    def load_weights(self, weights, weight_mapper=None, **kwargs):
        if self._is_dflash2:  # taken before the backbone remap
            weights = self._load_dflash2_weights(weights)
        remapped = {}
        for key, value in weights.items():
            if key in ("fc.weight", "hidden_norm.weight"):
                remapped[key] = value
            elif key == "norm.weight":
                remapped["model.norm.weight"] = value
            elif not key.startswith("model."):
                remapped[f"model.{key}"] = value
            else:
                remapped[key] = value
        missing = [k for k in self.WRAPPER_OWNED_WEIGHTS if k not in remapped]
        if missing:
            raise ValueError(f"{type(self).__name__}: checkpoint is missing {missing}")
        fc = remapped.pop("fc.weight")
        self.fc = nn.Linear(fc.shape[1], fc.shape[0], bias=False)
        self.fc.weight.data = fc.float().clone()
        hn = remapped.pop("hidden_norm.weight")
        self.hidden_norm = nn.RMSNorm(hn.shape[0], eps=getattr(self.config, "rms_norm_eps", 1e-6))
        self.hidden_norm.weight.data = hn.float().clone()
        shared = ("embed_tokens", "lm_head")
        need = {n.rsplit(".", 1)[0] for n, _ in self.draft_model_full.named_parameters() if not any(s in n for s in shared)}
        have = {k.rsplit(".", 1)[0] for k in remapped}
        fused = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
        absent = sorted(m for m in need if m not in have and not any(
            f in m and all(m.replace(f, p) in have for p in ps) for f, ps in fused.items()))
        if absent:
            raise ValueError(f"{type(self).__name__}: checkpoint provides no weights for {absent[:8]}")
        self.draft_model_full.load_weights(weights=remapped, weight_mapper=weight_mapper, allow_partial_loading=True)

    def _load_dflash2_weights(self, weights):
        """Reproduces ``_load_dflash2_weights`` @ d70a2287: per layer ``attention_conv`` and
        ``mlp_conv`` (``DFlash2BlockConv`` from ``layers.{i}.{name}.base_kernel`` and
        ``.kernel_projection.weight``), the ``DFlash2CandidateSelector`` from
        ``candidate_selector.{predecessor_codebook, successor_codebook, hidden_projection.weight}``;
        a missing key raises; returns the other weights."""
        consumed = set()

        def take(key):
            if key not in weights:
                raise ValueError(f"DFlash 2 drafter is missing checkpoint weight '{key}'. The draft checkpoint "
                                 "declares DFlash 2 in its config but does not ship the corresponding weights.")
            consumed.add(key)
            return weights[key].float().clone()  # CPU float32 here; the real one moves it to CUDA

        hidden = self.config.hidden_size
        att, mlp = nn.ModuleList(), nn.ModuleList()
        for i in range(len(self.model.layers)):
            for name, convs in (("attention_conv", att), ("mlp_conv", mlp)):
                p = f"layers.{i}.{name}."
                convs.append(DFlash2BlockConv(base_kernel=take(p + "base_kernel"),
                                              kernel_projection_weight=take(p + "kernel_projection.weight"),
                                              taps=self._dflash2_conv_taps,
                                              group_size=self._dflash2_conv_group_size, hidden_size=hidden))
        selector = DFlash2CandidateSelector(
            predecessor_codebook=take("candidate_selector.predecessor_codebook"),
            successor_codebook=take("candidate_selector.successor_codebook"),
            hidden_projection_weight=take("candidate_selector.hidden_projection.weight"),
            top_k=self._dflash2_selector_top_k, vocab_size=self.config.vocab_size, rank=self._dflash2_selector_rank)
        self.attention_convs, self.mlp_convs, self.candidate_selector = att, mlp, selector
        return {k: v for k, v in weights.items() if k not in consumed}

    def load_weights_from_target_model(self, target_model):
        self.draft_model_full.model.embed_tokens = target_model.model.embed_tokens
        self.draft_model_full.lm_head = target_model.lm_head
        self.lm_head = target_model.lm_head

    def _build_fused_kv_buffers(self):
        attns = [l.self_attn for l in self.model.layers]
        a0 = attns[0]
        self._fused_kv_weight = torch.cat([a.qkv_proj.weight[a0.q_size:a0.q_size + 2 * a0.kv_size] for a in attns], 0)
        has_k = [hasattr(a, "k_norm") for a in attns]
        self._k_norm_stacked = torch.stack([a.k_norm.weight.data.float() for a in attns]) if all(has_k) else None
        self._k_norm_eps = a0.k_norm.variance_epsilon if all(has_k) else None
        self._has_qk_norm = all(has_k) and all(hasattr(a, "q_norm") for a in attns)
        self._num_attn_layers, self._num_heads = len(attns), a0.num_heads
        self._num_kv_heads, self._head_dim = a0.num_key_value_heads, a0.head_dim

    def precompute_context_kv(self, projected_hidden, positions):
        """Returns k, v [N, L, nkv, hd]: k post k_norm (plain: ``rms(k) * w``) and RoPE."""
        if self._fused_kv_weight is None:
            self._build_fused_kv_buffers()
        n, L, nkv, hd = projected_hidden.shape[0], self._num_attn_layers, self._num_kv_heads, self._head_dim
        kv = torch.nn.functional.linear(projected_hidden.float(), self._fused_kv_weight.float()).view(n, L, 2, nkv, hd)
        k, v = kv[:, :, 0], kv[:, :, 1]
        if self._k_norm_stacked is not None:
            k = torch.nn.functional.rms_norm(k, (hd,), eps=self._k_norm_eps) * self._k_norm_stacked.view(1, L, 1, hd)
        k = self._rope(k.transpose(0, 1), positions).transpose(0, 1)  # rope over [L, N, nkv, hd]
        return k, v

    # -- masks --------------------------------------------------------------------------
    def _warn_inferred_attention_windows(self):
        if getattr(self.config, "use_sliding_window", None) is not None:
            return
        n = getattr(self.config, "num_hidden_layers", None) or len(self.model.layers)
        by = {}
        for i in range(n):
            w = get_layer_attention_window(self.config, i)
            if w is not None:
                by.setdefault(w, []).append(i)
        for w, idx in by.items():
            logger.warning(f"DFlash inferred pooled-context sliding-window attention from checkpoint config for "
                           f"draft layers {idx}: window={w}. Set use_sliding_window explicitly.")

    def _get_attention_mask_args(self, layer_idx):
        types = getattr(self.config, "layer_types", None)
        sliding = False
        if types:
            sliding = _is_sliding_attention_layer(types[layer_idx % len(types)])
        window = get_layer_attention_window(self.config, layer_idx)
        sliding = sliding or window is not None
        explicit = getattr(self.config, "is_causal", None) if self._is_dflash2 else None
        if explicit is not None:
            causal = bool(explicit)
        elif not sliding:
            return False, (-1, -1)
        else:
            causal = self._sliding_layers_causal or window is not None
        if window is None:
            return causal, (-1, -1)
        if not causal:
            return False, (window - 1, window - 1)
        return True, (window - 1, 0)

    def _resolve_block_attention(self, layer_idx):
        causal, window = self._get_attention_mask_args(layer_idx)
        swa = self._layer_windows[layer_idx] if layer_idx < len(self._layer_windows) else (-1, -1)
        if swa != (-1, -1):
            window = swa
        return causal, window

    def validate_block_attention_windows(self) -> None:
        if self.dflash_attention_backend != "TRTLLM":
            return
        n = getattr(self.config, "num_hidden_layers", None) or len(self.model.layers)
        for i in range(n):
            causal, (left, _) = self._resolve_block_attention(i)
            if causal or left < 0:
                continue
            raise ValueError(f"DFlash draft layer {i} attends non-causally within a {left + 1}-token sliding "
                             "window. The TRTLLM DFlash attention backend does not support non-causal "
                             "sliding-window attention. Use attention_backend=VANILLA or FA4.")

    # -- the block decode ---------------------------------------------------------------
    def _check_xqa_windows(self, block_size):
        """``_prepare_dflash_xqa_buffers``' refusal: a non-causal layer needs a right window of at
        least ``block_size - 1`` (XQA drops the right bound)."""
        for idx in range(len(self._layer_windows)):
            causal, window = self._resolve_block_attention(idx)
            if not causal and 0 <= window[1] < block_size - 1:
                raise RuntimeError(f"DFlash XQA attention needs a right-hand window of at least block_size - 1 "
                                   f"({block_size - 1}) on non-causal layers, but draft layer {idx} configures {window[1]}.")

    def dflash_forward(self, noise_embedding, query_positions, num_ctx_per_req, ctx_k_cache, ctx_v_cache,
                       ctx_cache_batch_idx, ctx_kv_cache=None, ctx_page_table=None):
        """Returns [B * block, hidden]. VANILLA: dense ``ctx_k_cache``/``ctx_v_cache``
        ``[slots, L, capacity, nkv, hd]`` indexed by ``ctx_cache_batch_idx``. TRTLLM/FA4/XQA:
        ``ctx_kv_cache[layer]`` ``[pages, 2, nkv, P, hd]`` (HND) and ``ctx_page_table`` whose rows
        ``ctx_cache_batch_idx`` selects (``block_tables``)."""
        backend = self.dflash_attention_backend
        is_paged = backend in ("TRTLLM", "FA4", "XQA")
        if is_paged and (ctx_kv_cache is None or ctx_page_table is None):
            raise RuntimeError(f"DFlash {backend} requires a paged context cache and page table.")
        if self._fused_kv_weight is None:
            self._build_fused_kv_buffers()
        a0 = self.model.layers[0].self_attn
        q_size, kv_size, hd = a0.q_size, a0.kv_size, a0.head_dim
        nh, nkv = a0.num_heads, a0.num_key_value_heads
        B, blk = noise_embedding.shape[:2]
        hidden = noise_embedding.float()
        seqlen0 = num_ctx_per_req[:B].to(torch.int32)
        seq_after = seqlen0 + blk
        if is_paged:
            if backend == "XQA":
                self._check_xqa_windows(blk)
            block_tables = ctx_page_table.index_select(0, ctx_cache_batch_idx.long())
            pages_per_slot, page_size = block_tables.size(1), ctx_kv_cache[0].size(-2)
            kv_indices = block_tables.flatten()
            kv_indptr = torch.arange(0, (B + 1) * pages_per_slot, pages_per_slot, dtype=torch.int32)
            kv_last_page_len = ((seq_after - 1) % page_size) + 1
            append_batch = torch.arange(B, dtype=torch.int32).view(-1, 1).expand(-1, blk).reshape(-1)
            append_pos = (seqlen0.view(-1, 1) + torch.arange(blk, dtype=torch.int32)).reshape(-1)
        residual = None
        has_block_conv = self.has_block_conv
        for li, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            flat = hidden.reshape(-1, hidden.shape[-1])
            if residual is None:
                residual = hidden.clone()
                normed = layer.input_layernorm(flat)
            else:
                normed, rf = layer.input_layernorm(flat, residual.reshape(-1, residual.shape[-1]))
                residual = rf.reshape(B, blk, -1)
            if has_block_conv:  # DFlash 2: prepare on the normed input, finish after o_proj / the MLP
                normed, attn_coeff = self.attention_convs[li].prepare(normed, blk)
            qkv = attn.qkv_proj(normed).reshape(B, blk, -1)
            q, k, v = qkv[..., :q_size], qkv[..., q_size:q_size + kv_size], qkv[..., q_size + kv_size:]
            if self._has_qk_norm:
                q = attn.q_norm(q.reshape(-1, hd)).reshape(B, blk, q_size)
                k = attn.k_norm(k.reshape(-1, hd)).reshape(B, blk, kv_size)
            q = self._rope(q.reshape(B, blk, nh, hd), query_positions)
            k = self._rope(k.reshape(B, blk, nkv, hd), query_positions)
            v = v.reshape(B, blk, nkv, hd)
            causal, window = self._resolve_block_attention(li)
            if is_paged:
                layer_cache = ctx_kv_cache[li]
                append = self._dflash_trtllm_gen_ops.append_paged_kv_cache if backend == "TRTLLM" \
                    else self._dflash_paged_append
                append(k.reshape(-1, nkv, hd), v.reshape(-1, nkv, hd), append_batch, append_pos, layer_cache,
                       kv_indices, kv_indptr, kv_last_page_len, kv_layout="HND")
                kv = (layer_cache[:, 0], layer_cache[:, 1])
                q_flat = q.reshape(-1, nh, hd)
                if backend == "TRTLLM":
                    out = torch.empty_like(q_flat)
                    ops = self._dflash_trtllm_gen_ops
                    if causal:
                        ops.batch_decode_with_kv_cache(query=q_flat, kv_cache=kv, block_tables=block_tables,
                                                       seq_lens=seq_after, window_left=window[0], out=out,
                                                       q_len_per_req=blk, kv_layout="HND")
                    else:
                        cum_q = torch.arange(0, (B + 1) * blk, blk, dtype=torch.int32)
                        ops.batch_context_with_kv_cache(query=q_flat, kv_cache=kv, block_tables=block_tables,
                                                        seq_lens=seq_after, window_left=window[0], out=out,
                                                        cum_seq_lens_q=cum_q, causal=False, kv_layout="HND")
                elif backend == "FA4":
                    left, right = window
                    out, _ = self._dflash_fa4_fwd(q, layer_cache[:, 0].transpose(1, 2), layer_cache[:, 1].transpose(1, 2),
                                                  seqused_k=seq_after, page_table=block_tables, softmax_scale=hd ** -0.5,
                                                  causal=causal, window_size_left=None if left < 0 else left,
                                                  window_size_right=None if right < 0 else right)
                else:  # XQA: the draft mask is causal-prefix or whole-block
                    mask = torch.tensor([[[(1 << (i + 1)) - 1 if causal else (1 << blk) - 1] for i in range(blk)]])
                    out = self._dflash_xqa_decode(query=q_flat, kv_cache=kv, block_tables=block_tables,
                                                  seq_lens=seq_after, window_left=window[0], q_len_per_req=blk,
                                                  mask=mask, kv_layout="HND")
                out = out.reshape(B, blk, nh, hd)
            else:
                for bi in range(B):
                    slot, c = int(ctx_cache_batch_idx[bi]), int(seqlen0[bi])
                    ctx_k_cache[slot, li, c:c + blk] = k[bi]
                    ctx_v_cache[slot, li, c:c + blk] = v[bi]
                out = self._dflash_flash_attention(q, ctx_k_cache[:, li], ctx_v_cache[:, li], seq_after,
                                                   ctx_cache_batch_idx, causal, window)
            h = attn.o_proj(out.reshape(B * blk, q_size))
            if has_block_conv:
                h = self.attention_convs[li].finish(h, attn_coeff, blk)
            h, rf = layer.post_attention_layernorm(h, residual.reshape(-1, residual.shape[-1]))
            if has_block_conv:
                h, mlp_coeff = self.mlp_convs[li].prepare(h, blk)
            h = layer.mlp(h)
            if has_block_conv:
                h = self.mlp_convs[li].finish(h, mlp_coeff, blk)
            hidden, residual = h.reshape(B, blk, -1), rf.reshape(B, blk, -1)
        out, _ = self.model.norm(hidden.reshape(-1, hidden.shape[-1]), residual.reshape(-1, residual.shape[-1]))
        return out


_DSPARK_HEAD_KEY_ALIASES = {"use_confidence_head": ("use_confidence_head", "enable_confidence_head")}


def resolve_dspark_head_config(pretrained_config, key):
    """Reproduces modeling_dflash.py @ d70a2287 ``resolve_dspark_head_config``: for each alias of
    ``key``, the first non-None of ``dspark_config[name]``, ``dflash_config[name]``,
    top-level ``dspark_<name>``, top-level ``<name>``; None when declared nowhere."""
    ds = getattr(pretrained_config, "dspark_config", None) or {}
    df = getattr(pretrained_config, "dflash_config", None) or {}
    for name in _DSPARK_HEAD_KEY_ALIASES.get(key, (key,)):
        for value in (ds.get(name), df.get(name), getattr(pretrained_config, f"dspark_{name}", None),
                      getattr(pretrained_config, name, None)):
            if value is not None:
                return value
    return None


def declares_dspark_heads(pretrained_config) -> bool:
    """Reproduces ``declares_dspark_heads`` @ d70a2287."""
    r = resolve_dspark_head_config
    return bool(str(r(pretrained_config, "projector_type") or "").lower() == "dspark"
                or r(pretrained_config, "shift_label") or r(pretrained_config, "use_confidence_head")
                or int(r(pretrained_config, "markov_rank") or 0) > 0)


def _build_dflash_draft(model_config, draft_config, lm_head, model):
    """Reproduces ``_build_dflash_draft`` @ d70a2287 (Laguna branch not reproduced): refuses a
    drafter that declares the DSpark head set, else ``DFlashForCausalLM``."""
    if declares_dspark_heads(draft_config.pretrained_config):
        raise ValueError("This drafter checkpoint declares the DSpark head set, which decoding_type "
                         "'DFlash' does not implement. Set speculative_config.decoding_type to 'DSpark'.")
    return DFlashForCausalLM(draft_config, dflash_attention_backend=model_config.spec_config.attention_backend)


if not OLD:
    _build_dflash_draft = register_draft_model(SpeculativeDecodingMode.DFLASH)(_build_dflash_draft)
