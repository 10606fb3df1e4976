"""The compiled drafter: one frozen, versioned record of everything a host or engine needs.

Flattening (:func:`~.flatten.flatten`) builds a :class:`ResolvedDrafter` and writes its
``model_dump(mode="json")`` as the converted ``config.json``'s ``draftsmith`` section.
:meth:`ResolvedDrafter.from_config` is the only reader of that section (host, emitter,
export, CLI, docs, tests). Every math-bearing value carries where it came from in
:attr:`ResolvedDrafter.sources` (a checkpoint key, a spec default, a family default or a
derivation).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Mapping, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field, model_validator

from ...lowering.base import DEVICE_CLASSES, DeviceClass, LoweringInfo, MaskSpec, get_lowering
from ...transforms.base import dtype_from_name
from ..errors import UserError
from .rope import read_scaling
from ..spec.overrides import reach

#: Version of the ``draftsmith`` section this code writes and reads.
RESOLVED_VERSION = 1

NormKind = Literal["input_layernorm", "post_attention_layernorm", "q_norm", "k_norm", "hidden_norm", "norm"]
NORM_KINDS: tuple[str, ...] = NormKind.__args__

#: Head dims assumed for TensorRT-LLM's context FMHA kernel on this path (an assumption,
#: see docs/trtllm-interface.md); only checked for layers whose lowering needs that kernel.
CONTEXT_KERNEL_HEAD_DIMS: tuple[int, ...] = (64, 128, 256)


def max_draft_len_rule(block_size: int, sample_from_anchor: bool) -> int:
    """``K``, tokens drafted per step: ``B`` when slot 0 already predicts
    (``sample_from_anchor``), else ``B - 1``. The one place this rule is written."""
    if block_size < 2 and not sample_from_anchor:
        raise UserError(f"dflash_config.block_size: {block_size} leaves no slot to draft")
    return block_size if sample_from_anchor else block_size - 1


def check_lowering(name: str, device: str, head_dim: Optional[int] = None, where: str = "") -> LoweringInfo:
    """The lowering ``name`` checked for ``device`` (and ``head_dim`` when given).

    The one per-lowering rule: raises :class:`UserError` (prefixed ``where``) for an unknown
    name (listing the known ones), a device class it does not run on, or a head dim it lacks.
    """
    prefix = f"{where}: " if where else ""
    if device not in DEVICE_CLASSES:
        raise UserError(f"{prefix}device class {device!r}: expected one of {', '.join(DEVICE_CLASSES)}")
    try:
        info = get_lowering(name)
    except KeyError as e:
        raise UserError(f"{prefix}{e.args[0]}") from None
    if device not in info.devices:
        raise UserError(f"{prefix}lowering {name} does not run on {device} (it runs on {', '.join(info.devices)})")
    if head_dim is not None and info.head_dims is not None and head_dim not in info.head_dims:
        raise UserError(f"{prefix}lowering {name} supports head dims {list(info.head_dims)}, not {head_dim}")
    return info


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Rope(_Frozen):
    """Rotary position embedding (partial NeoX over the first ``rotary_dim`` dims of a head)."""

    theta: float = Field(description="RoPE base (``rope_theta``)", gt=0, strict=True, allow_inf_nan=False)
    type: str = Field(description="RoPE type (``rope_type``): ``default``, ``linear``, ``yarn`` or ``llama3``")
    scaling: dict[str, Any] = Field(default_factory=dict,
                                    description="the rope type's complete scaling parameters: as read, plus "
                                                "transformers' documented defaults and YaRN's derived "
                                                "``attention_factor`` (empty for ``default``)")

    @model_validator(mode="after")
    def _complete(self):
        """The scaling parameters are exactly what ``compile/rope.py`` reads for the type
        (a stored set with a missing or foreign key is refused)."""
        params, filled = read_scaling(self.type, self.scaling, "draftsmith.rope.scaling", theta=self.theta)
        if filled or params != self.scaling:
            raise ValueError(f"rope.scaling {self.scaling!r} is not the complete parameter set of rope_type "
                             f"{self.type!r} (missing: {', '.join(sorted(set(params) - set(self.scaling)))})")
        return self


class Mlp(_Frozen):
    """The gated MLP: ``down(act(gate) * up)``."""

    kind: Literal["swiglu", "swiglu_oai"] = Field(
        description="``swiglu`` (``hidden_act: silu``) or ``swiglu_oai`` (``hidden_act: swigluoai``: clamped, "
                    "``alpha`` sigmoid gate, ``up + 1``)")
    alpha: Optional[float] = Field(None, description="``swiglu_alpha`` (swiglu_oai only)", gt=0, strict=True,
                                   allow_inf_nan=False)
    limit: Optional[float] = Field(None, description="``swiglu_limit``, the clamp (swiglu_oai only)", gt=0,
                                   strict=True, allow_inf_nan=False)


#: bounds checked before anything is allocated (real drafters: heads <= 128, head_dim <= 512,
#: vocab <= 262 144, hidden <= 16 384, block_size <= 16); the memory estimate refuses the rest
MAX_HEADS = 4096
MAX_HEAD_DIM = 4096
MAX_VOCAB = 1 << 24
MAX_WIDTH = 1 << 20
MAX_LAYERS = 4096
MAX_BLOCK_SIZE = 4096


class Dims(_Frozen):
    """Sizes (all in elements)."""

    hidden: int = Field(description="``hidden_size``", gt=0, le=MAX_WIDTH, strict=True)
    heads: int = Field(description="``num_attention_heads``", gt=0, le=MAX_HEADS, strict=True)
    kv_heads: int = Field(description="``num_key_value_heads``", gt=0, le=MAX_HEADS, strict=True)
    head_dim: int = Field(description="``head_dim``", gt=0, le=MAX_HEAD_DIM, strict=True)
    rotary_dim: int = Field(description="``rotary_dim``: leading dims of each head that are roped", gt=0, le=MAX_HEAD_DIM, strict=True)
    intermediate: int = Field(description="``intermediate_size`` of the MLP", gt=0, le=MAX_WIDTH, strict=True)
    vocab: int = Field(description="``vocab_size``", gt=0, le=MAX_VOCAB, strict=True)
    num_layers: int = Field(description="``num_hidden_layers`` of the drafter", gt=0, le=MAX_LAYERS, strict=True)
    target_hidden: int = Field(description="``target_hidden_size``: hidden size of the target model", gt=0, le=MAX_WIDTH, strict=True)
    num_target_layers: int = Field(description="how many target layers feed ``fc`` (``len(target_layer_ids)``)", gt=0, le=MAX_LAYERS, strict=True)
    dtype: Literal["bfloat16", "float16", "float32"] = Field(description="``torch_dtype`` of the weights")

    @model_validator(mode="after")
    def _shapes(self):
        if self.heads % self.kv_heads:
            raise ValueError(f"num_attention_heads {self.heads} is not a multiple of num_key_value_heads {self.kv_heads}")
        if self.rotary_dim > self.head_dim or self.rotary_dim % 2:
            raise ValueError(f"rotary_dim {self.rotary_dim} must be even and in 1..head_dim ({self.head_dim})")
        return self


class Heads(_Frozen):
    """DSpark's optional heads (drafter reference, section 1)."""

    markov_rank: int = Field(0, description="rank of the Markov head's low-rank bigram bias; 0 = no head", ge=0, le=MAX_WIDTH,
                             strict=True)
    markov_head_type: Literal["vanilla"] = Field("vanilla", description="Markov head variant")
    confidence: bool = Field(False, description="whether the drafter has a confidence head", strict=True)
    confidence_with_markov: bool = Field(False, description="whether the confidence head also reads the Markov "
                                                             "embedding of the previous token", strict=True)

    @model_validator(mode="after")
    def _needs_markov(self):
        if self.confidence_with_markov and not (self.confidence and self.markov_rank):
            raise ValueError("confidence_head_with_markov needs a confidence head and a Markov head (markov_rank > 0)")
        return self


class BlockConv(_Frozen):
    """DFlash 2's grouped block convolution around each sublayer (docs/dflash2-reference.md section 2):
    ``layers.{i}.{attention_conv,mlp_conv}.base_kernel [2, T, hidden]`` and
    ``.kernel_projection.weight [2*T*G, hidden]``, ``G = hidden / group_size``."""

    kernel_size: int = Field(description="``conv_kernel_size``: taps ``T`` along the block (causal, block-local)",
                             ge=1, le=MAX_BLOCK_SIZE, strict=True)
    group_size: int = Field(description="``conv_group_size``: channels ``g`` sharing one dynamic coefficient "
                                        "(channel ``c`` uses group ``c // g``)", ge=1, le=MAX_WIDTH, strict=True)


class Unary(_Frozen):
    """The selector's unary score of a candidate from its logit ``l`` (reference section 3, rows 1-2)."""

    multiplier: float = Field(description="``output_multiplier`` ``m`` (1 = none)", gt=0, strict=True, allow_inf_nan=False)
    softcap: Optional[float] = Field(description="``final_logit_softcapping`` ``cap``: ``cap * tanh(y / cap)``; "
                                                 "null = none", gt=0, strict=True, allow_inf_nan=False)
    order: Literal["scale_then_cap", "cap_then_scale"] = Field(
        description="``scale_then_cap``: ``softcap(m * l)`` (z-lab); ``cap_then_scale``: ``m * softcap(l)``")


class Selector(_Frozen):
    """DFlash 2's pairwise candidate selector and its path walk (reference sections 3-5):
    ``candidate_selector.{predecessor_codebook, successor_codebook} [vocab, rank]``,
    ``candidate_selector.hidden_projection.weight [rank, hidden]``."""

    rank: int = Field(description="``selector_rank`` ``r``", ge=1, le=MAX_WIDTH, strict=True)
    top_k: int = Field(description="``selector_top_k`` ``k``: candidates per drafted position", ge=2, le=MAX_VOCAB, strict=True)
    unary: Unary = Field(description="how a candidate's logit becomes its unary score")
    chain: Literal["greedy", "sampled"] = Field(
        description="``greedy``: each step conditions on the argmax (TensorRT-LLM); ``sampled``: on the "
                    "sampled candidate (vLLM, z-lab); equal at temperature 0")


class DFlash2(_Frozen):
    """DFlash 2's additions to the DFlash block decode (docs/dflash2-reference.md)."""

    conv: BlockConv = Field(description="the grouped block convolutions (every layer, both sublayers)")
    selector: Selector = Field(description="the candidate selector")
    input_embedding_scale: float = Field(description="``input_embedding_scale``: the block embeddings are "
                                                     "multiplied by it (1 = none)", gt=0, strict=True,
                                         allow_inf_nan=False)


class LayerPlan(_Frozen):
    """One layer's attention: its mask and its lowering per device class."""

    mask: MaskSpec = Field(description="which keys a block query sees (causality, window)")
    lowering: dict[DeviceClass, str] = Field(description="lowering name per device class")

    @model_validator(mode="before")
    @classmethod
    def _mask_types(cls, data: Any) -> Any:
        """A stored window is a JSON integer >= 1 or null (no ``"8"``, ``8.0`` or ``true``), a stored
        causality true or false (no ``"false"`` or ``0``)."""
        mask = data.get("mask") if isinstance(data, Mapping) else None
        w = mask.get("window") if isinstance(mask, Mapping) else None
        if w is not None and (type(w) is not int or w < 1):
            raise ValueError(f"mask.window {w!r} must be an integer >= 1 or null")
        c = mask.get("causal") if isinstance(mask, Mapping) else None
        if c is not None and not isinstance(c, bool):
            raise ValueError(f"mask.causal {c!r} must be true or false")
        return data


class LoweringTable(_Frozen):
    """The checked lowering of every layer on one device class."""

    device: DeviceClass = Field(description="the device class")
    lowerings: tuple[str, ...] = Field(description="lowering name per layer")
    needs_context_kernel: bool = Field(description="whether any layer's lowering needs the engine's context kernel")


class ResolvedDrafter(_Frozen):
    """The compiled drafter (the ``draftsmith`` section of a converted ``config.json``).

    Drafted slots: with ``sample_from_anchor`` slot ``j`` predicts the token at ``C+j+1`` and
    all ``B`` slots draft; without it slot 0 holds only the anchor and ``K = B-1``.
    """

    version: Literal[1] = Field(RESOLVED_VERSION, description="version of this record's layout")
    adapter: str = Field(description="name of the adapter that compiled it")
    spec_sha256: str = Field(description="sha256 of the adapter spec (JSON dump, after overrides)")
    family: str = Field(description="drafter family (closed registry)")
    dims: Dims = Field(description="sizes")
    rope: Rope = Field(description="rotary position embedding")
    rms_norm_eps: float = Field(description="epsilon of every RMSNorm", gt=0, strict=True, allow_inf_nan=False)
    mlp: Mlp = Field(description="the MLP's activation")
    block_size: int = Field(description="``B``: block slots per draft step", gt=0, le=MAX_BLOCK_SIZE, strict=True)
    mask_token_id: int = Field(description="token id filling the block slots after the anchor", ge=0, strict=True)
    target_layer_ids: tuple[Annotated[int, Field(strict=True, ge=-1)], ...] = Field(description="target layers whose *outputs* feed ``fc`` "
                                                          "(output convention: 0 = first layer's output)")
    sample_from_anchor: bool = Field(description="whether slot 0 drafts too (``K = B``) or holds only the anchor",
                                     strict=True)
    norms: dict[NormKind, Literal["gemma", "plain"]] = Field(
        description="per norm kind: ``gemma`` (stored ``w``, applied as ``1 + w``) or ``plain``")
    heads: Heads = Field(description="Markov and confidence heads")
    layers: tuple[LayerPlan, ...] = Field(description="per layer: mask and lowering per device class")
    value_scale: float = Field(1.0, description="``dflash_config.attention_value_scale``: every layer's values "
                                                "(context and block) are multiplied by it before attention; 1 = none",
                               gt=0, strict=True, allow_inf_nan=False)
    attention_bias: bool = Field(False, description="``attention_bias``: q/k/v/o_proj carry a bias "
                                                    "(``layers.{i}.self_attn.{q,k,v,o}_proj.bias``)", strict=True)
    mlp_bias: bool = Field(False, description="``mlp_bias``: gate/up/down_proj carry a bias "
                                              "(``layers.{i}.mlp.{gate,up,down}_proj.bias``)", strict=True)
    dflash2: Optional[DFlash2] = Field(None, description="DFlash 2's block convolutions and candidate selector; "
                                                          "null for DFlash / DSpark drafters")
    qk_norm: bool = Field(True, description="whether q and k are RMS-normed per head before RoPE "
                                            "(``self_attn.{q,k}_norm``; the spec's ``layout.qk_norm``)", strict=True)
    writer_ignored: dict[str, str] = Field(default_factory=dict,
                                           description="config keys the checkpoint's writer ignores (and so "
                                                       "draftsmith) -> the reader that would run them differently")
    irrelevant: dict[str, str] = Field(default_factory=dict,
                                       description="config keys the spec declares irrelevant (present in the "
                                                   "checkpoint's config) -> the reason")
    sources: dict[str, str] = Field(description="for every math-bearing field (dotted path): where its value came "
                                                "from, a checkpoint key or a spec/family default; plus "
                                                "``config.<key>`` for each other flattened key that took a spec "
                                                "default (source text ending `` value=<JSON>``)")

    @model_validator(mode="before")
    @classmethod
    def _computed_in(cls, data: Any) -> Any:
        """``max_draft_len`` is computed; a stored value must agree with the rule."""
        if isinstance(data, Mapping) and "max_draft_len" in data:
            data = dict(data)
            stored = data.pop("max_draft_len")
            block = data.get("block_size")
            if type(block) is not int or block < 1:
                return data  # the field's own check names the bad block_size
            want = max_draft_len_rule(block, bool(data.get("sample_from_anchor")))
            if stored != want:
                raise ValueError(f"max_draft_len {stored} contradicts the derived {want} (block_size "
                                 f"{data.get('block_size')}, sample_from_anchor {data.get('sample_from_anchor')})")
        return data

    @model_validator(mode="after")
    def _consistent(self):
        if len(self.layers) != self.dims.num_layers:
            raise ValueError(f"layers has {len(self.layers)} entries for {self.dims.num_layers} layers")
        if len(self.target_layer_ids) != self.dims.num_target_layers:
            raise ValueError(f"target_layer_ids has {len(self.target_layer_ids)} entries, "
                             f"num_target_layers is {self.dims.num_target_layers}")
        if set(self.norms) != set(NORM_KINDS):
            raise ValueError(f"norms must name exactly {', '.join(NORM_KINDS)}")
        if not 0 <= self.mask_token_id < self.dims.vocab:
            raise ValueError(f"mask_token_id {self.mask_token_id} must be < vocab_size ({self.dims.vocab})")
        max_draft_len_rule(self.block_size, self.sample_from_anchor)
        if self.dflash2 is not None:
            if self.dims.hidden % self.dflash2.conv.group_size:
                raise ValueError(f"conv_group_size {self.dflash2.conv.group_size} does not divide hidden_size "
                                 f"{self.dims.hidden}")
            if self.dflash2.selector.top_k > self.dims.vocab:
                raise ValueError(f"selector_top_k {self.dflash2.selector.top_k} exceeds the vocab ({self.dims.vocab})")
        return self

    # -- derived ------------------------------------------------------------------------
    @computed_field(description="``K``: tokens drafted per step (``B`` with sample_from_anchor, else ``B-1``)")
    @property
    def max_draft_len(self) -> int:
        return max_draft_len_rule(self.block_size, self.sample_from_anchor)

    @property
    def first_slot(self) -> int:
        """Block slot whose logits draft token 0 (slots ``first_slot .. B-1`` draft, in order)."""
        return 0 if self.sample_from_anchor else 1

    def selector_choice(self, selector: bool) -> Optional[bool]:
        """Whether drafts go through DFlash 2's candidate selector for a requested ``selector``
        (``None``: the drafter has none); ``selector=False`` for a drafter without one is refused."""
        if self.dflash2 is None:
            if not selector:
                raise UserError("selector=false: this drafter has no candidate selector (only DFlash 2 drafters do)")
            return None
        return bool(selector)

    def walk_chain(self, selector: bool, temperature: float) -> tuple[str, Optional[float]]:
        """The selector walk a draft step runs for ``selector`` and ``temperature`` (>= 0):
        ``("greedy", None)`` at temperature 0, ``("sampled", temperature)`` for a drafter whose
        recorded chain is ``sampled``; a temperature is refused where nothing samples (no
        selector, ``selector=false``, or a greedy chain, whose walk ignores it)."""
        if not temperature:
            return "greedy", None
        why = ("this drafter has no candidate selector (the host drafts greedily)" if self.dflash2 is None else
               "selector=false drafts the plain argmax" if not selector else
               "the recorded selector_chain is greedy: its walk conditions on the argmax whatever the temperature"
               if self.dflash2.selector.chain == "greedy" else None)
        if why:
            raise UserError(f"temperature={temperature:g}: {why}")
        return "sampled", float(temperature)

    @property
    def masks(self) -> tuple[MaskSpec, ...]:
        """Each layer's mask, in layer order."""
        return tuple(l.mask for l in self.layers)

    @property
    def torch_dtype(self):
        return dtype_from_name(self.dims.dtype)

    # -- reading ------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: Mapping[str, Any], where: str = "config.json") -> "ResolvedDrafter":
        """The record from a flattened ``config.json`` dict: the only reader of its
        ``draftsmith`` section. Raises :class:`UserError` naming the key on a missing or bad one."""
        section = config.get("draftsmith") if isinstance(config, Mapping) else None
        if not isinstance(section, Mapping):
            raise UserError(f"{where}: no draftsmith section (is this a draftsmith-converted config.json?)")
        version = section.get("version")
        if version != RESOLVED_VERSION:
            raise UserError(f"{where}: draftsmith.version {version!r} is not {RESOLVED_VERSION} "
                            "(re-run `draftsmith convert` with this draftsmith)")
        try:
            return cls.model_validate(section)
        except ValidationError as e:
            raise UserError(*(f"{where}: draftsmith.{'.'.join(str(p) for p in x['loc']) or '<top>'}: {x['msg']}"
                              for x in e.errors())) from None

    def section(self) -> dict[str, Any]:
        """The ``draftsmith`` section to write (JSON types)."""
        return self.model_dump(mode="json")

    # -- lowering validation (the one place) ---------------------------------------------
    def lowering_table(self, device: str, *, override: Optional[str] = None, check_available: bool = False,
                       context_kernel_head_dims: Sequence[int] = CONTEXT_KERNEL_HEAD_DIMS) -> LoweringTable:
        """Per layer the lowering on ``device`` (``override`` replaces every layer's), checked.

        Raises :class:`UserError` naming the layer when a lowering is unknown, does not run on
        ``device``, lacks the head dim, needs a context kernel the head dim lacks, or (with
        ``check_available``) cannot run in this process. The need for TensorRT-LLM's context
        kernel is derived from the lowerings, not assumed.
        """
        if device not in DEVICE_CLASSES:
            raise UserError(f"device class {device!r}: expected one of {', '.join(DEVICE_CLASSES)}")
        d = self.dims.head_dim
        names, needs = [], False
        for i, layer in enumerate(self.layers):
            m = layer.mask
            where = f"layer {i} ({'full' if m.window is None else f'window {m.window}'})"
            name = override or layer.lowering.get(device)
            if name is None:
                raise UserError(f"{where}: no lowering for device class {device}; pass lowering=<name> to override")
            info = check_lowering(name, device, d, where)
            if info.needs_context_kernel:
                needs = True
                if d not in context_kernel_head_dims:
                    raise UserError(f"{where}: lowering {name} needs the context kernel, which has no head dim {d}")
            if check_available and not info.available():
                raise UserError(f"{where}: lowering {name} cannot run in this process ({info.description})")
            names.append(name)
        return LoweringTable(device=device, lowerings=tuple(names), needs_context_kernel=needs)

    def lowering_infos(self, device: str, override: Optional[str] = None) -> list[LoweringInfo]:
        """The registered lowering of each layer on ``device``, checked and available here."""
        table = self.lowering_table(device, override=override, check_available=True)
        return [get_lowering(n) for n in table.lowerings]


#: how a source names a value taken from the spec's ``default:`` (or ``config.default_dtype``)
SPEC_DEFAULT = "spec default"
#: ``sources`` key prefix of a flattened config key outside the resolved fields that took a
#: spec default (its source text ends with ``VALUE_MARK`` and the value as JSON)
CONFIG_PREFIX = "config."
VALUE_MARK = " value="


def source_rows(resolved: ResolvedDrafter) -> list[tuple[str, Any, str]]:
    """``(field, value, source)`` for every entry of ``resolved.sources``, sorted by field."""
    flat = resolved.model_dump(mode="json")
    rows = []
    for key, src in sorted(resolved.sources.items()):
        if key.startswith(CONFIG_PREFIX):
            src, _, text = src.partition(VALUE_MARK)
            rows.append((key, json.loads(text), src))
            continue
        value, found = reach(flat, key.split("."))
        rows.append((key, value if found == len(key.split(".")) else None, src))
    return rows


def is_default(source: str) -> bool:
    """Whether a source names a spec or family default (not a checkpoint key, not a derivation)."""
    return not source.startswith("config.json") and "default" in source


def defaulted(resolved: ResolvedDrafter) -> list[tuple[str, Any, str]]:
    """The loading report's defaults: ``(field, value, source)`` for every field whose value
    came from the spec's ``default:`` or a family default, not from the checkpoint."""
    return [row for row in source_rows(resolved) if is_default(row[2])]


def dump_sources(resolved: ResolvedDrafter, rows: list[tuple[str, Any, str]] | None = None) -> str:
    """The loading report's lines: ``field = value  (source)``, one per math-bearing field
    (``rows``: a selection of :func:`source_rows`, default all)."""
    lines = [f"{key} = {value}  ({src})" for key, value, src in (source_rows(resolved) if rows is None else rows)]
    if rows is None:
        lines += [f"irrelevant {key}  (spec config.irrelevant: {why})" for key, why in sorted(resolved.irrelevant.items())]
        lines += [f"ignored as the writer does: {key}  (a reader differs: {who})"
                  for key, who in sorted(resolved.writer_ignored.items())]
    return "\n".join(lines)
