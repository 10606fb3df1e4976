"""The GQA DFlash/DSpark drafter on the PyTorch reference host (drafter reference, section 1).

Public names follow TensorRT-LLM's DFlash drafter interface and stay stable (the generated
TensorRT-LLM path runs against them): ``DFlashDraftModel(resolved, device, dtype, lowering)``,
``load_weights(weights, weight_mapper=None, **kwargs)``,
``load_weights_from_target_model(target_model)``, ``project_target_hidden(hidden_states)``,
``precompute_context_kv(projected_hidden, positions) -> (k, v)``,
``_get_attention_mask_args(layer_idx)`` (see docs/trtllm-interface.md), plus the host's own
``make_cache``, ``append_context(cache, target_hidden, seq)`` (paged, streamed),
``forward(input_ids, position_ids, cache)`` and ``draft(anchor, cache, selector=True)`` (one
greedy step). A DFlash 2 record (``resolved.dflash2``) adds each layer's block convolutions
(``layers.{i}.{attention_conv,mlp_conv}``), the block embeddings' ``input_embedding_scale`` and
``candidate_selector`` (docs/dflash2-reference.md).

Drafted slots: with ``sample_from_anchor`` every block slot ``j`` drafts the token at
position ``C+j+1`` (``K = B`` tokens); without it slot 0 is only the anchor and slot
``j >= 1`` drafts the token at ``C+j`` (``K = B-1``). Draft ``k`` comes from slot
``k + first_slot``; its Markov/confidence ``prev`` is the anchor for ``k = 0`` and draft
``k-1`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from ...lowering.base import device_class
from ..compile.resolved import ResolvedDrafter
from . import fused, memory
from .dflash2 import CandidateSelector, Chain, SelectorOutput, UnaryTransform
from .heads import ConfidenceHead, MarkovHead
from .kv_cache import PagedKVCache
from .layers import DFlashDecoderLayer, LayerShape
from .modules import PartialNeoxRope, RMSNorm


@dataclass
class DraftOutput:
    """One greedy draft step for ``N`` sequences, ``K`` drafted tokens each.

    ``tokens [N, K]`` int64; ``logits [N, K, V]`` float32 (lm_head plus Markov bias, the
    values the argmax ran on; with DFlash 2's selector its path logits: the realized score rows at
    the candidates, ``-inf`` elsewhere); ``confidence [N, K]`` float32 or ``None`` without a head;
    ``selector``: the selector's candidates and realized rows (``None`` when it did not run).
    """

    tokens: torch.Tensor
    logits: torch.Tensor
    confidence: Optional[torch.Tensor]
    selector: Optional[SelectorOutput] = None


class DFlashDraftModel(nn.Module):
    """GQA DFlash/DSpark drafter built from its compiled record ``resolved`` (the reader of a
    converted ``config.json`` parses it: ``ResolvedDrafter.from_config``).

    ``self.cfg`` is that :class:`ResolvedDrafter`,
    ``self.shape`` the per-layer sizes. ``device``: where weights and caches live; ``dtype``: weight dtype (default the config's
    ``torch_dtype``); ``lowering``: one lowering name for every layer, overriding the
    per-layer ``draftsmith.layers[i].lowering[device_class]`` table. Weights start
    uninitialised: call :meth:`load_weights` and :meth:`load_weights_from_target_model`.
    """

    def __init__(self, resolved: ResolvedDrafter, device: torch.device | str = "cpu", dtype: Optional[torch.dtype] = None,
                 lowering: Optional[str] = None):
        super().__init__()
        self.cfg = cfg = resolved
        self.shape = s = LayerShape.of(cfg)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.dtype = dtype or cfg.torch_dtype
        rope = PartialNeoxRope(s.head_dim, s.rotary_dim, s.rope_theta, self.device, cfg.rope.type, cfg.rope.scaling)
        with torch.device("meta"):
            self.fc = nn.Linear(cfg.dims.num_target_layers * cfg.dims.target_hidden, s.hidden, bias=False)
            self.hidden_norm = RMSNorm(s.hidden, s.eps, cfg.norms["hidden_norm"] == "gemma")
            d2 = cfg.dflash2
            conv = (d2.conv.kernel_size, d2.conv.group_size) if d2 is not None else None
            self.layers = nn.ModuleList(DFlashDecoderLayer(s, cfg.norms, rope, conv) for _ in range(cfg.dims.num_layers))
            self.norm = RMSNorm(s.hidden, s.eps, cfg.norms["norm"] == "gemma")
            self.candidate_selector = selector_of(cfg) if d2 is not None else None
            h = cfg.heads
            self.markov_head = MarkovHead(cfg.dims.vocab, h.markov_rank) if h.markov_rank else None
            self.confidence_head = (
                ConfidenceHead(s.hidden, h.markov_rank, h.confidence_with_markov) if h.confidence else None
            )
        # sizes come from the config: refuse weights that cannot fit before allocating them
        need = sum(p.numel() for p in self.parameters()) * self.dtype.itemsize
        free = memory.free_bytes(str(self.device))
        if free is not None and need > free:
            raise ValueError(f"config.json: the drafter's sizes (draftsmith.dims) need {need / 2**30:.2f} GiB of "
                             f"weights, {free / 2**30:.2f} GiB free on {self.device}")
        self.to(self.dtype).to_empty(device=self.device)
        for layer in self.layers:
            layer.stack_weights()
        self.rope = rope
        self.__dict__["embed_tokens"] = None  # borrowed from the target, not drafter parameters
        self.__dict__["lm_head"] = None
        self.device_class = device_class(self.device)
        self.lowerings = cfg.lowering_infos(self.device_class, lowering)

    # ---- introspection -------------------------------------------------------------------

    @property
    def layer_lowerings(self) -> list[str]:
        """Name of the lowering each layer runs (in layer order)."""
        return [info.name for info in self.lowerings]

    def _get_attention_mask_args(self, layer_idx: int) -> tuple[bool, tuple[int, int]]:
        """``(causal, (left, right))`` of layer ``layer_idx`` in flash-attn ``window_size``
        terms (``-1`` unbounded), from ``draftsmith.layers``."""
        m = self.cfg.masks[layer_idx]
        return m.causal, m.bounds

    # ---- weights ---------------------------------------------------------------------------

    def load_weights(self, weights: dict, weight_mapper: Optional[Callable[[str], Optional[str]]] = None,
                     **kwargs) -> None:
        """Copy ``weights`` (name -> tensor, DFlash target layout) into the drafter.

        ``weight_mapper``: optional ``name -> name | None`` applied first (``None`` drops the
        tensor). Every drafter parameter must be supplied exactly once with its shape; missing,
        unexpected or misshapen names raise ``ValueError`` listing them. Values are cast to
        the drafter's dtype and device. ``kwargs`` (e.g. ``allow_partial_loading``) are
        accepted for TensorRT-LLM's loader and ignored: loading is always strict.
        """
        params = dict(self.named_parameters())
        seen, unexpected, bad = set(), [], []
        for name, t in weights.items():
            name = weight_mapper(name) if weight_mapper else name
            if name is None:
                continue
            p = params.get(name)
            if p is None:
                unexpected.append(name)
            elif tuple(t.shape) != tuple(p.shape):
                bad.append(f"{name}: {tuple(t.shape)} != {tuple(p.shape)}")
            else:
                with torch.no_grad():
                    p.copy_(t.to(device=p.device, dtype=p.dtype))
                seen.add(name)
        missing = sorted(set(params) - seen)
        if missing or unexpected or bad:
            raise ValueError(
                "drafter weights do not match: "
                + "; ".join(f"{k} ({len(v)}): {', '.join(v[:8])}" for k, v in
                            (("missing", missing), ("unexpected", sorted(unexpected)), ("shape", bad)) if v)
            )

    def load_weights_from_target_model(self, target_model) -> None:
        """Borrow ``target.model.embed_tokens`` and ``target.lm_head`` (HF causal-LM shape).

        Shared as is when already on the drafter's device and dtype, else copied there.
        Their vocabulary must be the drafter's ``vocab_size``.
        """
        emb, head = target_model.model.embed_tokens, target_model.lm_head
        for name, mod in (("embed_tokens", emb), ("lm_head", head)):
            w = mod.weight
            if w.shape != (self.cfg.dims.vocab, self.shape.hidden):
                raise ValueError(f"target {name} is {tuple(w.shape)}, drafter needs "
                                 f"{(self.cfg.dims.vocab, self.shape.hidden)}")
            if w.device != self.device or w.dtype != self.dtype:
                mod = _copy_module(mod, name, self.device, self.dtype)
            self.__dict__[name] = mod

    # ---- context ---------------------------------------------------------------------------

    def project_target_hidden(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Context features ``hidden_norm(fc(h))``: ``[T, n*target_hidden]`` -> ``[T, hidden]``
        (cast to the drafter's device and dtype first)."""
        return self.hidden_norm(self.fc(hidden_states.to(device=self.device, dtype=self.dtype)))

    def precompute_context_kv(self, projected_hidden: torch.Tensor, positions: torch.Tensor,
                              layers: Optional[list[int]] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Context keys/values of ``projected_hidden [T, hidden]`` at ``positions [T]``.

        Returns ``(k, v)``, each ``[T, L, Hkv, D]`` over ``layers`` (default all, in order):
        ``k = rope(k_norm(k_proj(c)))``, ``v = v_proj(c)`` (TensorRT-LLM's shape; the context
        path has no input norm).
        """
        layers = range(len(self.layers)) if layers is None else layers
        kv = [self.layers[l].self_attn.kv(projected_hidden, positions) for l in layers]
        return torch.stack([k for k, _ in kv], 1), torch.stack([v for _, v in kv], 1)

    def make_cache(self, num_seqs: int, page_size: int = 16, max_context: Optional[int] = None) -> PagedKVCache:
        """An empty :class:`PagedKVCache` for this drafter's layers (``max_context``: needed for full layers)."""
        s = self.shape
        return PagedKVCache(self.cfg.masks, num_seqs, s.kv_heads, s.head_dim, page_size, max_context,
                            self.device, self.dtype)

    @torch.inference_mode()
    def append_context(self, cache: PagedKVCache, target_hidden: torch.Tensor, seq: int = 0,
                       chunk: int = 4096) -> None:
        """Append ``T`` context tokens to sequence ``seq`` of ``cache``: ``target_hidden
        [T, n*target_hidden]`` (any device; moved ``chunk`` rows at a time) at positions
        ``C..C+T-1``, ``C`` the sequence's current length.

        Only what a later query can see is computed: a windowed layer (``W``) gets the last
        ``W-1`` positions of the new range; rows no layer needs are never projected. So a
        prompt of any length streams through in O(chunk + W) memory for windowed layers.
        """
        start = cache.ctx_len(seq)
        end = start + target_hidden.shape[0]
        need = [max(start, cache.needed_from(l, end)) for l in range(len(self.layers))]
        for a in range(min(need, default=end), end, chunk):
            b = min(a + chunk, end)
            c = self.project_target_hidden(target_hidden[a - start:b - start])
            pos = torch.arange(a, b, device=self.device)
            for s in sorted({max(a, n) for n in need if n < b}):
                group = [l for l, n in enumerate(need) if max(a, n) == s]
                k, v = self.precompute_context_kv(c[s - a:], pos[s - a:], group)
                for i, l in enumerate(group):
                    cache.write(l, seq, s, k[:, i], v[:, i])
        cache.advance(seq, end - start)

    # ---- the draft step --------------------------------------------------------------------

    def block_inputs(self, anchor: torch.Tensor, cache: PagedKVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """``input_ids [N, B] = [a, m, ..., m]`` and ``position_ids [N, B] = C_n + j`` (on device)."""
        b = self.cfg.block_size
        ids = torch.full((anchor.shape[0], b), self.cfg.mask_token_id, dtype=torch.long, device=self.device)
        ids[:, 0] = anchor
        pos = cache.ctx_lens.long()[:, None] + torch.arange(b, device=self.device)
        return ids, pos

    def embed_block(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The block's input rows: the target's embeddings, times DFlash 2's ``input_embedding_scale``."""
        x = self.embed_tokens(input_ids)
        d2 = self.cfg.dflash2
        return x * d2.input_embedding_scale if d2 is not None and d2.input_embedding_scale != 1.0 else x

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, cache: PagedKVCache) -> torch.Tensor:
        """Block hidden states ``z = norm(x) [N, B, hidden]`` for ``input_ids``/``position_ids [N, B]``."""
        x = self.embed_block(input_ids)
        for l, layer in enumerate(self.layers):
            x = layer(x, position_ids, cache.view(l), self.cfg.masks[l], self.lowerings[l].fn)
        return self.norm(x)

    @torch.inference_mode()
    def draft(self, anchor: torch.Tensor, cache: PagedKVCache, selector: bool = True,
              chain: Optional[Chain] = None, generator: Optional[torch.Generator] = None) -> DraftOutput:
        """One draft step: ``anchor [N]`` int64 (position ``C_n``) -> :class:`DraftOutput`.

        The transformer runs once for all ``B`` slots; drafts are then taken in order, draft
        ``k = argmax(lm_head(z[first_slot + k]) + w2 @ w1[prev_k])``. A DFlash 2 drafter instead
        hands ``lm_head`` of slots ``1..K`` and their final-normed states to its candidate selector
        (anchors: ``anchor``, the last accepted token) and returns the walked path and its path
        logits (``-inf`` outside each position's candidates); ``selector=False`` drafts the plain
        argmax of the same drafter. The walk is greedy unless ``chain`` is a sampled one (the
        record's ``walk_chain``), whose Gumbel noise ``generator`` draws (on the model's device).
        Host-sync free (CUDA-graph safe when the lowerings are).
        """
        if self.embed_tokens is None:
            raise RuntimeError("call load_weights_from_target_model(target) before drafting")
        anchor = anchor.to(self.device, torch.long)
        z = self.forward(*self.block_inputs(anchor, cache), cache)[:, self.cfg.first_slot:]
        if selector and self.candidate_selector is not None:
            out = self.candidate_selector(self.lm_head(z), z, anchor, generator, chain)
            return DraftOutput(out.tokens, out.logits, None, out)
        # Slot-major logits [K, N, V]: each slot's bias add and argmax run on contiguous rows.
        # (2-D rows with standard strides: cuBLAS picked a 7x slower kernel for a [K, 1, h]
        # input whose size-1 dim had a non-standard stride, seen on an H200.)
        k_slots, n = z.shape[1], z.shape[0]
        lm = self.lm_head(z.transpose(0, 1).reshape(k_slots * n, -1)).view(k_slots, n, -1)
        use_fused = fused.enabled(lm)
        logits = torch.empty(lm.shape, dtype=torch.float32, device=lm.device) if use_fused else lm.float()
        prev, toks = anchor, []
        for k in range(self.cfg.max_draft_len):
            bias = self.markov_head.bias(self.markov_head.embed(prev)) if self.markov_head is not None else None
            if use_fused:  # add, store float32 and argmax in one pass over the row
                prev = fused.bias_argmax(lm[k], bias, logits[k])
            else:
                if bias is not None:
                    logits[k] += bias  # promoted to float32 by the add
                prev = logits[k].argmax(-1)
            toks.append(prev)
        tokens = torch.stack(toks, 1)
        conf = None
        if self.confidence_head is not None:  # all slots at once: draft k's head sees the token before it
            before = torch.cat([anchor[:, None], tokens[:, :-1]], 1)
            emb = self.markov_head.embed(before) if self.markov_head is not None else None
            conf = self.confidence_head(z[:, : tokens.shape[1]], emb)
        return DraftOutput(tokens, logits.transpose(0, 1), conf)


def selector_of(cfg: ResolvedDrafter) -> CandidateSelector:
    """DFlash 2's candidate selector of a compiled drafter (uninitialised weights). Its own chain is
    greedy (what a sampled chain is at temperature 0); ``draft`` is handed the sampled one, with its
    temperature, by the record's ``walk_chain``."""
    sel = cfg.dflash2.selector
    unary = UnaryTransform(sel.unary.multiplier, sel.unary.softcap, sel.unary.order)
    return CandidateSelector(cfg.dims.hidden, cfg.dims.vocab, sel.rank, sel.top_k, unary, Chain("greedy", None))


def _copy_module(mod: nn.Module, name: str, device, dtype) -> nn.Module:
    """A copy of an embedding / linear head on ``device`` in ``dtype`` (the target keeps its own)."""
    w = mod.weight.detach().to(device=device, dtype=dtype)
    if name == "embed_tokens":
        return nn.Embedding.from_pretrained(w, freeze=True)
    bias = getattr(mod, "bias", None)
    new = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None, device="meta")
    new.weight = nn.Parameter(w, requires_grad=False)
    if bias is not None:
        new.bias = nn.Parameter(bias.detach().to(device=device, dtype=dtype), requires_grad=False)
    return new
