"""The adapter spec: a pydantic v2 model of ``adapters/*.yaml`` (pure data, no code).

Every name in a spec (family, transform op, lowering) resolves through a closed registry
at compile time (:mod:`draftsmith.framework.engine`); this module only checks shapes of
data. ``draftsmith schema out=FILE`` exports :func:`json_schema`.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...transforms.base import dtype_from_name

MAX_REGEX_LEN = 512
#: Most unbounded quantifiers (``*``, ``+``, ``{n,}``) one spec regex may hold: k adjacent
#: overlapping ones backtrack in O(n**k) on a failing name.
MAX_UNBOUNDED = 6


def _backtracking_problem(pattern: str) -> str | None:
    """Why ``pattern`` can backtrack catastrophically, or None (checked on the parsed regex).

    Refused: a repeat (max > 1) whose body holds a variable repeat (``(a+)+``, ``((a)+)*``,
    ``(a?){30}``: nested quantifiers), or an alternation whose branches can start alike
    or be empty (``(a|aa)+``, ``(a|a?)*``); more than :data:`MAX_UNBOUNDED` unbounded
    quantifiers in all.
    """
    try:
        from re import _parser as sre  # Python >= 3.11
        from re import _constants as C
    except ImportError:  # pragma: no cover
        import sre_constants as C
        import sre_parse as sre

    REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT) + ((C.POSSESSIVE_REPEAT,) if hasattr(C, "POSSESSIVE_REPEAT") else ())
    ANY = object()

    def first(items):
        """The set of first characters of a sequence, ANY if unknown, None if it can be empty."""
        for op, av in items:
            if op is C.LITERAL:
                return {av}
            if op is C.IN and all(o is C.LITERAL for o, _ in av):
                return {a for _, a in av}
            if op in (C.AT,):
                continue
            if op is C.SUBPATTERN:
                f = first(av[-1])
                if f is None:
                    continue
                return f
            if op in REPEATS and av[0] == 0:
                return ANY
            if op in REPEATS:
                return first(av[2])
            return ANY
        return None

    unbounded = 0

    def walk(items, in_repeat: bool) -> str | None:
        nonlocal unbounded
        for op, av in items:
            if op in REPEATS:
                lo, hi, body = av
                if hi == C.MAXREPEAT:
                    unbounded += 1
                if in_repeat and hi != lo:
                    return "nests quantifiers"
                r = walk(body, in_repeat or hi > 1)
                if r:
                    return r
            elif op is C.BRANCH:
                alts = av[1]
                if in_repeat:
                    seen: set = set()
                    for alt in alts:
                        f = first(alt)
                        if f is None or f is ANY or f & seen:
                            return "repeats an alternation whose branches overlap or can be empty"
                        seen |= f
                for alt in alts:
                    r = walk(alt, in_repeat)
                    if r:
                        return r
            elif op is C.SUBPATTERN:
                r = walk(av[-1], in_repeat)
                if r:
                    return r
            elif op in (C.ASSERT, C.ASSERT_NOT):
                r = walk(av[1], in_repeat)
                if r:
                    return r
            elif op is C.GROUPREF_EXISTS:
                for sub in av[1:]:
                    if sub is not None:
                        r = walk(sub, in_repeat)
                        if r:
                            return r
        return None

    why = walk(list(sre.parse(pattern)), False)
    if why is None and unbounded > MAX_UNBOUNDED:
        why = f"has {unbounded} unbounded quantifiers (at most {MAX_UNBOUNDED})"
    return why


def check_regex(pattern: str) -> str:
    """Compile a spec regex once, refusing oversize or catastrophically backtracking ones."""
    if not isinstance(pattern, str):
        raise ValueError("regex must be a string")
    if len(pattern) > MAX_REGEX_LEN:
        raise ValueError(f"regex longer than {MAX_REGEX_LEN} characters")
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        raise ValueError(f"invalid regex {pattern!r}: {e}") from None
    why = _backtracking_problem(pattern)
    if why:
        raise ValueError(f"regex {pattern!r} {why} (catastrophic backtracking)")
    return pattern


def check_replacement(pattern: str, repl: str) -> None:
    """Refuse a regex replacement naming groups that ``pattern`` lacks (``\\2``, ``\\g<x>``)."""
    try:
        re.sub(pattern, repl, "")  # the replacement template is parsed before any matching
    except (re.error, IndexError) as e:
        raise ValueError(f"replacement {repl!r} does not fit regex {pattern!r}: {e}") from None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class MatchSpec(Strict):
    architectures: list[str] = Field(
        min_length=1, description="`config.json` `architectures` values this adapter serves (routing key)."
    )
    model_type: Optional[str] = Field(
        None, description="If set, the raw config's `model_type` must equal it as well."
    )


class FieldRule(Strict):
    from_: list[str] = Field(
        default_factory=list,
        alias="from",
        description="Dotted source keys in order of preference (aliases across releases); "
        "the first present wins. Looked up in the merged view of the config sections.",
    )
    default: Any = Field(None, description="Value when no alias is present (None = leave unset).")
    required: bool = Field(False, description="Refuse the config when no alias is present and there is no default.")


class ConfigSpec(Strict):
    sections: list[str] = Field(
        default_factory=lambda: ["text_config"],
        description="Nested sections merged over the top level, earliest winning "
        "(`text_config` values win over top-level copies). The sections themselves are removed.",
    )
    fields: dict[str, FieldRule] = Field(
        default_factory=dict,
        description="Output keys (dotted for nesting, e.g. `dflash_config.block_size`) and where they come from.",
    )
    drop: list[str] = Field(
        default_factory=list, description="Dotted keys removed from the output (e.g. `quantization_config`)."
    )
    dtype_keys: list[str] = Field(
        default_factory=lambda: ["torch_dtype", "dtype"],
        description="Keys giving the output dtype, in order of preference; written back as `torch_dtype`.",
    )
    default_dtype: str = Field("bfloat16", description="Output dtype when no dtype key is present.")

    @field_validator("default_dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        dtype_from_name(v)  # ValueError naming the known dtypes
        return v
    refuse_unhandled_quantization: bool = Field(
        True,
        description="Refuse a config whose `quantization_config.quant_method` no weight transform dequantizes.",
    )


class RenameRule(Strict):
    kind: Literal["prefix", "template", "regex"] = Field(
        description="`prefix`: replace a leading string; `template`: invertible name template with "
        "`{x}` (one component) / `{x*}` (several) placeholders; `regex`: Python regex with capture groups."
    )
    match: str = Field(description="The prefix, template or regex matched against the source name.")
    to: Optional[str] = Field(
        description="Replacement (prefix, template, or regex replacement with `\\1` groups); `null` drops the tensor."
    )
    inverse_match: Optional[str] = Field(
        None, description="`regex` only: a regex over target names that inverts this rule (for `synth`)."
    )
    inverse_to: Optional[str] = Field(None, description="`regex` only: replacement for `inverse_match`.")
    optional: bool = Field(
        False, description="The rule may match no tensor of a checkpoint. Otherwise a rule that matches "
        "nothing is an error: `inspect` exits 1 and `convert` exits 2, naming the rule and the closest names."
    )

    @model_validator(mode="after")
    def _check(self):
        if self.kind == "regex":
            check_regex(self.match)
            if (self.inverse_match is None) != (self.inverse_to is None):
                raise ValueError("inverse_match and inverse_to go together")
            if self.inverse_match is not None:
                check_regex(self.inverse_match)
            for rx, repl in ((self.match, self.to), (self.inverse_match, self.inverse_to)):
                if rx is not None and repl is not None:
                    check_replacement(rx, repl)
        elif self.inverse_match is not None or self.inverse_to is not None:
            raise ValueError(f"inverse_match/inverse_to apply to kind regex only, not {self.kind}")
        return self


class TransformRule(Strict):
    op: str = Field(description="Transform name from the closed registry (see `draftsmith.transforms`).")
    match: str = Field(
        ".*", description="Regex over (renamed) tensor names selecting the transform's primary inputs."
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="The op's parameters, validated by the op's own schema at compile time."
    )
    optional: bool = Field(
        False, description="The rule may apply to no tensor of a checkpoint. Otherwise a rule that applies to "
        "nothing is an error: `inspect` exits 1 and `convert` exits 2, naming the rule and the closest names."
    )

    @field_validator("match")
    @classmethod
    def _regex(cls, v: str) -> str:
        return check_regex(v)


class WeightsSpec(Strict):
    rename: list[RenameRule] = Field(
        default_factory=list,
        description="Ordered rename rules; the first that matches a name applies; unmatched names are kept.",
    )
    transforms: list[TransformRule] = Field(
        default_factory=list, description="Transforms applied in order to the renamed tensors."
    )
    shared_with_target: list[str] = Field(
        default_factory=lambda: ["embed_tokens.weight", "lm_head.weight"],
        description="Target-layout names the drafter borrows from the target; never expected in the "
        "checkpoint, ignored if present.",
    )
    max_shard_bytes: int = Field(
        5 * 2**30, gt=0, description="Largest output shard in bytes (safetensors files of the converted checkpoint)."
    )


class LoweringChoice(Strict):
    sm100: str = Field("window_decode_merge", description="Lowering on Blackwell (SM100/SM103).")
    sm90: str = Field("window_decode_merge", description="Lowering on Hopper (SM90).")
    cpu: str = Field("dense", description="Lowering on the CPU (and other GPUs).")


class LayerOverride(Strict):
    causal: Optional[bool] = Field(None, description="Force this layer causal (true) or non-causal (false).")
    window: Optional[int | Literal["full"]] = Field(
        None, description="Force this layer's window (`full` for no window)."
    )


class AttentionSpec(Strict):
    windowed_causal: bool = Field(
        False, description="Family default for windowed layers: false = non-causal `(W-1, W-1)` (DSpark)."
    )
    full_causal: bool = Field(False, description="Family default for full-attention layers: false = non-causal.")
    window: Optional[int] = Field(
        None, ge=1, description="Override the window `W` of windowed layers (None: from the checkpoint config)."
    )
    explicit_causality_wins: bool = Field(
        True,
        description="Checkpoint metadata `is_causal: true` or `sliding_window_non_causal: false` overrides "
        "the family default (also for windows declared only through `use_swa`).",
    )
    layers: dict[int, LayerOverride] = Field(default_factory=dict, description="Per-layer overrides by layer index.")
    lowering: dict[Literal["windowed", "full"], LoweringChoice] = Field(
        default_factory=lambda: {"windowed": LoweringChoice(), "full": LoweringChoice()},
        description="Lowering per device class for windowed and for full-attention layers.",
    )


class DocsSpec(Strict):
    model: str = Field(description="Model name shown in the supported-drafters table.")
    example_checkpoint: str = Field(description="Example checkpoint path or hub id.")
    notes: list[str] = Field(default_factory=list, description="Footnotes for the docs table.")
    limitations: list[str] = Field(default_factory=list, description="Known limitations, shown in the docs.")
    reference_example: bool = Field(
        False,
        description="Quote this adapter's YAML as the worked example in the generated spec reference "
        "(`docs/adapter-spec.md`); exactly one shipped adapter sets it.",
    )
    serving: dict[str, Any] = Field(
        default_factory=dict, description="Extra `speculative_config` keys shown in the serving snippet."
    )


class EngineSpec(Strict):
    trtllm_backbone: Optional[str] = Field(
        None,
        description="`package.module:ClassName` of the TensorRT-LLM class that `draftsmith emit` registers "
        "under the drafter architecture to build its layers; `generated` or unset: `emit` generates the backbone "
        "from the spec out of TensorRT-LLM's building blocks (per-norm Gemma flags, rotary_dim, swiglu_oai).",
    )


class ExportSpec(Strict):
    alias: Optional[str] = Field(
        None, pattern=r"^[a-z][a-z0-9_]*$",
        description="A name `draftsmith convert to=<alias>` resolves to this adapter (besides its own name).",
    )
    with_heads: Optional[bool] = Field(
        None,
        description="With an alias shared by several adapters: this one is picked when the drafter has "
        "(true) or lacks (false) a Markov or confidence head; unset: always.",
    )


class SynthSpec(Strict):
    config: dict[str, Any] = Field(
        description="A full-size source `config.json` (as the real checkpoint ships it) that `synth` writes."
    )
    tiny: dict[str, Any] = Field(
        default_factory=dict,
        description="Dotted-key overrides applied to `config` for `scale=tiny` (small dims, small window).",
    )
    target_hidden_size: Optional[str] = Field(
        None, description="Config key of the target model's hidden size (default: `hidden_size`)."
    )


class AdapterSpec(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Adapter name (the YAML file's stem).")
    family: str = Field(description="Drafter family (closed registry), e.g. `gqa_dflash`.")
    description: str = Field("", description="One line about the drafter this adapter serves.")
    match: MatchSpec = Field(description="Which raw `config.json` files this adapter serves.")
    config: ConfigSpec = Field(default_factory=ConfigSpec, description="How `config.json` is flattened.")
    weights: WeightsSpec = Field(default_factory=WeightsSpec, description="How tensors are renamed and transformed.")
    attention: AttentionSpec = Field(
        default_factory=AttentionSpec, description="Masks and lowerings, resolved per layer."
    )
    target_layer_ids: Literal["output", "input"] = Field(
        "output",
        description="Whether the checkpoint's target layer ids name a target layer's output or its input "
        "(input of layer i == output of layer i-1). Converted configs always use `output`.",
    )
    max_draft_len: Optional[int] = Field(
        None, ge=1, description="Explicit max_draft_len; refused if it contradicts the derived value."
    )
    export: ExportSpec = Field(default_factory=ExportSpec, description="How `convert to=` names this adapter.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="Serving-engine classes `emit` names.")
    docs: DocsSpec = Field(description="What the generated docs table shows.")
    synth: SynthSpec = Field(description="How `draftsmith synth` makes a source-format checkpoint.")


def json_schema() -> dict:
    """The JSON Schema of an adapter spec (for editors and `draftsmith schema`)."""
    schema = AdapterSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "draftsmith adapter spec"
    return schema
