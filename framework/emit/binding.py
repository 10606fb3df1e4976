"""What a package written by ``draftsmith emit`` needs from the installed draftsmith at run time.

The package carries its compiled drafter as data (``resolved.json``: the
:class:`ResolvedDrafter` dump, with per-layer masks, lowerings, norm styles and
``max_draft_len``) and no path or hash of the machine that emitted it. Importing it:

- :func:`check_engine_version`: refuses a TensorRT-LLM older than the pinned minimum in one line,
  before anything version-specific is imported;
- :class:`PackagedDrafter`: answers the emitted class's overrides from the resolved drafter:
  :meth:`~PackagedDrafter.mask_args`, :meth:`~PackagedDrafter.check_combination`,
  :meth:`~PackagedDrafter.refuse_raw`, and :meth:`~PackagedDrafter.dflash_forward`, the block
  decode of TensorRT-LLM's ``DFlashForCausalLM.dflash_forward`` (amukkara/TensorRT-LLM @
  d70a2287, generic branch) with each layer's attention replaced by its draftsmith lowering
  for the device class, reading TensorRT-LLM's own context pool in place.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Optional

import torch

from ...lowering.base import DEVICE_CLASSES, PagedKV, device_class, get_lowering
from ..compile.resolved import ResolvedDrafter
from ..errors import UserError

#: The file of an emitted package holding its resolved drafter and emission facts.
PACKAGE_DATA = "resolved.json"

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?(?:(a|b|rc)(\d+))?")
_STAGE = {"a": 0, "b": 1, "rc": 2, None: 3}


def version_key(version: str) -> tuple:
    """Sortable key of a PEP 440 release string (``1.4.0rc1`` < ``1.4.0``); ValueError if unparsable."""
    m = _VERSION.match(str(version))
    if not m:
        raise ValueError(f"unparsable version {version!r}")
    major, minor, patch, stage, n = m.groups()
    return int(major), int(minor), int(patch or 0), _STAGE[stage], int(n or 0)


def check_engine_version(found: str, minimum: str, package: str) -> None:
    """Raise a one-line ImportError when TensorRT-LLM ``found`` is older than ``minimum``."""
    try:
        old = version_key(found) < version_key(minimum)
    except ValueError:
        old = True
    if old:
        raise ImportError(f"{package} needs TensorRT-LLM >= {minimum} (the draft-model registry and "
                          f"modeling_dspark); this is TensorRT-LLM {found}")


def config_dict(config: Any) -> dict:
    """A plain dict from a dict, a ``transformers.PretrainedConfig`` or an attribute bag."""
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    return dict(vars(config))


def rope_scaling_problem(r: ResolvedDrafter) -> Optional[str]:
    """Why TensorRT-LLM would serve ``r`` with the wrong positions, or None: the generated
    backbone passes only ``dim``/``theta`` to ``RopeParams``, so a scaled RoPE would run unscaled."""
    if r.rope.type == "default":
        return None
    return (f"rope_type {r.rope.type!r} (RoPE scaling) is not passed to TensorRT-LLM's RopeParams by the "
            "emitted package; the reference host (draftsmith draft) implements it")


class PackagedDrafter:
    """The resolved drafter an emitted package carries, and the run-time rules on it."""

    def __init__(self, data: Mapping[str, Any]):
        self.adapter: str = data["adapter"]
        self.architecture: str = data["architecture"]
        self.resolved = ResolvedDrafter.model_validate(data["resolved"])

    @classmethod
    def from_package(cls, package_dir: "str | Path") -> "PackagedDrafter":
        return cls(json.loads((Path(package_dir) / PACKAGE_DATA).read_text()))

    def bind(self, pretrained_config: Any) -> "BoundDrafter":
        """The checkpoint's compiled drafter (its ``draftsmith`` section); a raw checkpoint or
        another adapter's is refused in one line."""
        self.refuse_raw(pretrained_config)
        r = ResolvedDrafter.from_config(config_dict(pretrained_config))
        if r.adapter != self.adapter:
            raise ValueError(f"speculative_model was converted with adapter {r.adapter}; this package serves "
                             f"adapter {self.adapter} (emit {r.adapter})")
        problem = rope_scaling_problem(r)
        if problem:
            raise ValueError(f"speculative_model: {problem}")
        return BoundDrafter(self.adapter, r)

    # -- config ---------------------------------------------------------------------------
    def refuse_raw(self, pretrained_config: Any) -> None:
        """One-line ValueError printing the ``draftsmith convert`` command when the drafter
        config is not a draftsmith-converted one (TensorRT-LLM's drafter path honours no
        config-loader registration in the pinned version)."""
        has = (pretrained_config.get("draftsmith") if isinstance(pretrained_config, Mapping)
               else getattr(pretrained_config, "draftsmith", None))
        if not isinstance(has, Mapping):
            raise ValueError(
                f"speculative_model is an unconverted {self.architecture} checkpoint; run `draftsmith convert "
                f"adapter={self.adapter} source=<that checkpoint> out=<dir>` and point speculative_model at <dir>")



class BoundDrafter:
    """One checkpoint's compiled drafter and the run-time rules on it."""

    def __init__(self, adapter: str, resolved: ResolvedDrafter):
        self.adapter, self.resolved = adapter, resolved
        self.masks = resolved.masks
        self._bounds = tuple((m.causal, m.bounds) for m in self.masks)
        self._tables: dict = {}

    def mask_args(self, layer_idx: int) -> tuple[bool, tuple[int, int]]:
        """``(causal, (left, right))`` of layer ``layer_idx`` in flash-attn terms (``-1`` unbounded)."""
        return self._bounds[layer_idx]

    # -- lowerings ------------------------------------------------------------------------
    def lowerings(self, device: str) -> Optional[tuple[str, ...]]:
        """Each layer's lowering on ``device``; None for a device class the spec has no table for
        (TensorRT-LLM's own backend then runs, with its own checks). ValueError in one line when
        the spec's table does not work there."""
        if device not in DEVICE_CLASSES:
            return None
        if device in self._tables:
            return self._tables[device]
        try:
            self._tables[device] = self.resolved.lowering_table(device).lowerings
            return self._tables[device]
        except UserError as e:
            raise ValueError(f"{self.adapter} on {device}: {e} (device classes with a table: "
                             f"{', '.join(DEVICE_CLASSES)}; pass lowering overrides to `draftsmith emit`)") from None

    def check_combination(self, backend: str, device: str) -> None:
        """One-line ValueError naming the backend/lowering/device combination when it cannot run."""
        names = self.lowerings(device)
        if names is None:
            return
        for i, name in enumerate(names):
            info = get_lowering(name)
            if not info.available():
                raise ValueError(f"{self.adapter}: layer {i} lowering {name} cannot run here (attention_backend "
                                 f"{backend}, device {device}): {info.description}")

    # -- the block decode -----------------------------------------------------------------
    def dflash_forward(self, model, device: str, noise_embedding, query_positions, num_ctx_per_req,
                       ctx_k_cache, ctx_v_cache, ctx_cache_batch_idx, ctx_kv_cache=None, ctx_page_table=None):
        """``DFlashForCausalLM.dflash_forward`` (d70a2287, generic branch: per-layer q/k norm
        modules, RoPE from layer 0's cache) with each layer's attention through its lowering.

        Reads TensorRT-LLM's context pool in place (no copy) as one :class:`PagedKV` per layer
        and writes the block K/V at positions ``ctx_len + j`` as TensorRT-LLM does:

        - dense pool (VANILLA): ``ctx_k_cache`` / ``ctx_v_cache`` ``[slots, L, capacity, nkv, hd]``,
          one page per slot (:func:`dense_layer_cache`);
        - paged pool (TRTLLM, FA4, XQA): ``ctx_kv_cache`` (``[L, pages, 2, nkv, P, hd]`` or a
          per-layer list of ``[pages, 2, nkv, P, hd]`` views) and ``ctx_page_table``
          (:func:`paged_layer_cache`).

        Returns ``[B * block, hidden]``.
        """
        paged = ctx_kv_cache is not None or ctx_page_table is not None
        if paged and (ctx_kv_cache is None or ctx_page_table is None):
            raise ValueError(f"{self.adapter}: a paged context cache needs both ctx_kv_cache and ctx_page_table")
        fns = [get_lowering(n).fn for n in self.lowerings(device)]
        if model._fused_kv_weight is None:
            model._build_fused_kv_buffers()
        layers = model.model.layers
        a0 = layers[0].self_attn
        q_size, kv_size, hd = a0.q_size, a0.kv_size, a0.head_dim
        nh, nkv = a0.num_heads, a0.num_key_value_heads
        b, blk = noise_embedding.shape[:2]
        ctx = num_ctx_per_req[:b].to(torch.int32)
        rows = ctx_cache_batch_idx[:b].long()
        table = ctx_page_table.index_select(0, rows).to(torch.int32) if paged else rows.view(-1, 1).to(torch.int32)
        scale = hd ** -0.5
        hidden, residual = noise_embedding.reshape(b * blk, -1), None
        for li, layer in enumerate(layers):
            attn = layer.self_attn
            if residual is None:
                residual = hidden
                normed = layer.input_layernorm(hidden)
            else:
                normed, residual = layer.input_layernorm(hidden, residual)
            qkv = attn.qkv_proj(normed)
            q, k, v = qkv[..., :q_size], qkv[..., q_size:q_size + kv_size], qkv[..., q_size + kv_size:]
            if model._has_qk_norm:
                q = attn.q_norm(q.reshape(-1, hd))
                k = attn.k_norm(k.reshape(-1, hd))
            q = model._rope(q.reshape(b, blk, nh, hd), query_positions)
            k = model._rope(k.reshape(b, blk, nkv, hd), query_positions)
            v = v.reshape(b, blk, nkv, hd)
            if paged:
                cache = paged_layer_cache(ctx_kv_cache[li], table, ctx, nkv, hd)
            else:
                cache = dense_layer_cache(ctx_k_cache[:, li], ctx_v_cache[:, li], table, ctx)
            write_block(cache, k, v)
            kp, vp = cache.k_pages, cache.v_pages
            out = fns[li](q.to(kp.dtype), cache, k.to(kp.dtype), v.to(vp.dtype), self.masks[li], scale)
            h = attn.o_proj(out.reshape(b * blk, q_size))
            h, residual = layer.post_attention_layernorm(h, residual)
            hidden = layer.mlp(h)
        out, _ = model.model.norm(hidden, residual)
        return out


def dense_layer_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                      ctx_lens: torch.Tensor) -> PagedKV:
    """One layer of TensorRT-LLM's dense DFlash pool (VANILLA; ``ctx_k_cache[:, layer]``
    ``[slots, capacity, nkv, hd]``) as a :class:`PagedKV` with one page per slot: ``slots``
    ``[N, 1]`` int32 is each sequence's slot. A view, no copy."""
    return PagedKV(k_cache, v_cache, slots, ctx_lens)


def paged_layer_cache(layer_cache: torch.Tensor, block_table: torch.Tensor, ctx_lens: torch.Tensor,
                      kv_heads: int, head_dim: int) -> PagedKV:
    """One layer of TensorRT-LLM's paged DFlash pool as a :class:`PagedKV`, in place.

    ``layer_cache`` ``[pages, 2, nkv, P, hd]`` is ``ctx_kv_cache[layer]``: the HND block of
    ``DFlashWorker._lazy_init_ctx_buffers`` (private arena ``[L, pages, 2, nkv, P, hd]``) or
    ``KVCacheManager.get_buffers(layer, kv_layout="HND")`` (a strided view over a page-major pool
    of every layer); K is ``[:, 0]``, V ``[:, 1]`` (amukkara/TensorRT-LLM @ d70a2287,
    modeling_dflash.py ``dflash_forward``: ``kv_cache=(layer_cache[:, 0], layer_cache[:, 1])``,
    ``kv_layout="HND"``). ``block_table`` ``[N, pages_per_seq]`` int32 is
    ``ctx_page_table.index_select(0, ctx_cache_batch_idx)``: token ``t`` of sequence ``n`` is slot
    ``t % P`` of page ``block_table[n, t // P]``. ``PagedKV`` reads pages modulo the table width,
    which is the same page while ``ctx + block <= width * P`` (TensorRT-LLM sizes the arena to
    ``max_ctx + block`` and clamps a managed request's ``ctx`` to its pages minus ``block``)."""
    if layer_cache.dim() != 5 or layer_cache.shape[1] != 2 or layer_cache.shape[2] != kv_heads \
            or layer_cache.shape[4] != head_dim or layer_cache.stride(-1) != 1:
        raise ValueError(f"ctx_kv_cache layer must be [pages, 2, {kv_heads}, page_size, {head_dim}] (HND, K and V per "
                         f"block) with a contiguous last dim; got {tuple(layer_cache.shape)} strides "
                         f"{tuple(layer_cache.stride())}")
    k_pages = layer_cache[:, 0].transpose(1, 2)  # [pages, P, nkv, hd], views
    v_pages = layer_cache[:, 1].transpose(1, 2)
    return PagedKV(k_pages, v_pages, block_table, ctx_lens)


def write_block(cache: PagedKV, k: torch.Tensor, v: torch.Tensor) -> None:
    """Write the block's K/V ``[N, B, nkv, hd]`` at positions ``ctx_lens[n] + j`` into the
    cache's pages, in place (TensorRT-LLM's block append: the VANILLA index put, the paged
    backends' ``append_paged_kv_cache``)."""
    n, blk = k.shape[:2]
    pos = cache.ctx_lens.long()[:, None] + torch.arange(blk, device=k.device)[None, :]
    page_size, ring = cache.page_size, cache.ring_pages
    pages = cache.block_table.long().gather(1, (pos // page_size) % ring)
    slots = pos % page_size
    cache.k_pages[pages, slots] = k.to(cache.k_pages.dtype)
    cache.v_pages[pages, slots] = v.to(cache.v_pages.dtype)


def device_class_of(module: torch.nn.Module) -> str:
    """The device class of ``module``'s parameters (``cpu``, ``sm90``, ``sm100``, ``sm120`` ...)."""
    p = next(module.parameters(), None)
    return device_class(p.device if p is not None else None)
