"""The adapter spec: a pydantic v2 model of ``adapters/*.yaml`` (pure data, no code).

Every name in a spec (family, transform op, lowering) resolves through a closed registry
at compile time (:mod:`draftsmith.framework.engine`); this module only checks shapes of
data. ``draftsmith schema out=FILE`` exports :func:`json_schema`.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...transforms.base import check_dtype_name
from ...transforms.regex import MAX_REGEX_LEN, check_template, compile_regex
from ..errors import UserError
from ..io.safe_read import MAX_CONFIG_BYTES, load_json

def check_regex(pattern: str) -> str:
    """A spec regex compiled once with RE2 (linear-time matching, no backtracking)."""
    compile_regex(pattern)
    return pattern


def check_replacement(pattern: str, repl: str) -> None:
    """Refuse a regex replacement naming groups that ``pattern`` lacks (``\\2``, ``\\g<x>``)."""
    check_template(compile_regex(pattern), pattern, repl)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class MatchSpec(Strict):
    architectures: list[str] = Field(
        min_length=1, description="`config.json` `architectures` values this adapter serves (routing key)."
    )
    model_type: Optional[str] = Field(
        None, description="If set, the raw config's `model_type` must equal it as well."
    )
    speculators_model_type: Optional[str] = Field(
        None,
        description="speculators' own format marker (`dflash`, `dspark`, ...). A config carrying "
        "`speculators_model_type` routes by it alone: to the adapters whose marker equals it, never "
        "to adapters without one. Unset: the adapter serves only configs without the marker.",
    )
    preferred: bool = Field(
        False,
        description="When several adapters match one config, the one marked preferred serves it "
        "(at most one may be); without a preferred one, several matches are an error listing them.",
    )
    subfolders: list[str] = Field(
        default_factory=list,
        description="Subfolders of a model root where this drafter is shipped (e.g. `dspark` for "
        "`<MiniMax checkpoint>/dspark`): `source=` may name the root and draftsmith goes in. "
        "Plain folder names (no `/`).",
    )

    @field_validator("subfolders")
    @classmethod
    def _plain_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name in (".", ".."):
                raise ValueError(f"subfolder {name!r}: a plain folder name (letters, digits, _ . -)")
        return v


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
        check_dtype_name(v)  # ValueError naming the known dtypes
        return v
    refuse_unhandled_quantization: bool = Field(
        True,
        description="Refuse a config whose `quantization_config.quant_method` no weight transform dequantizes.",
    )
    irrelevant: dict[str, str] = Field(
        default_factory=dict,
        description="Config keys (dotted, in the merged view of the sections; a key naming a mapping covers "
        "its whole subtree) that change nothing draftsmith computes, each with the reason, which the loading "
        "report shows. Every non-null key of a drafter's config must be read (by the family, a `fields` alias, a "
        "`dtype_keys` entry, the routing keys, a dequantized `quantization_config`), `fixed`, or declared here; "
        "any other key, nested sections included, is refused in one line naming it.",
    )
    fixed: dict[str, Any] = Field(
        default_factory=dict,
        description="Config keys (dotted, merged view) whose value this spec's math hard-codes (e.g. "
        "`use_gemma_norm: true` where `weights.transforms` implement Gemma norms): "
        "a config stating another value is refused in one line; absent, the spec's value is taken and "
        "reported. An export to this adapter writes these values.",
    )

    writer_ignores: dict[str, str] = Field(
        default_factory=dict,
        description="Config keys (dotted, merged view) that the code which saved such checkpoints ignores, so "
        "its forward (the one the drafter was trained with) is the truth and draftsmith ignores them too: "
        "each must also be listed in `drop`; the value names the reader that would run the key differently "
        "(e.g. `vLLM 0.33 qwen3_dflash rotates only the first partial_rotary_factor of each head`), which the "
        "loading report shows when the key is present.",
    )

    @model_validator(mode="after")
    def _writer_ignores_dropped(self):
        missing = [k for k in self.writer_ignores if k not in self.drop]
        if missing:
            raise ValueError(f"writer_ignores {', '.join(missing)}: list each in drop too (draftsmith must not read it)")
        return self

    @field_validator("irrelevant")
    @classmethod
    def _reasons(cls, v: dict[str, str]) -> dict[str, str]:
        for key, why in v.items():
            if not why.strip():
                raise ValueError(f"irrelevant.{key}: give the reason the key changes nothing")
        return v


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
    hf_window_switch: bool = Field(
        False,
        description="Windows as transformers' `Qwen3Config` reads them: a layer is windowed only when "
        "`use_sliding_window` is true (absent: false) and its `layer_types` entry is `sliding_attention` "
        "(`Qwen3Config` sets `sliding_window` to None otherwise, so those layers see every key); "
        "`use_sliding_window: true` without `layer_types` is refused (`Qwen3Config` would derive them from "
        "`max_window_layers`).",
    )
    layers: dict[int, LayerOverride] = Field(default_factory=dict, description="Per-layer overrides by layer index.")
    lowering: dict[Literal["windowed", "full"], LoweringChoice] = Field(
        default_factory=lambda: {"windowed": LoweringChoice(), "full": LoweringChoice()},
        description="Lowering per device class for windowed and for full-attention layers.",
    )


class LayoutSpec(Strict):
    qk_norm: bool = Field(
        True,
        description="Whether the drafter RMS-norms q and k per head before RoPE (`self_attn.q_norm` / "
        "`self_attn.k_norm`, Qwen3 style). `false` (Llama/Qwen2 style): the target layout has no "
        "`self_attn.{q,k}_norm.weight` and the host, the export and the emitted backbone apply none.",
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
    causality_keys: list[Literal["is_causal", "sliding_window_non_causal"]] = Field(
        default_factory=lambda: ["is_causal", "sliding_window_non_causal"],
        description="The explicit causality keys an export to this format writes (the resolved masks must "
        "read back from them and the `attention` defaults, else the export is refused). Leave out one the "
        "format's writer never writes and a reader would misapply: speculators saves no `is_causal`, and "
        "vLLM's qwen3_dflash reads an `is_causal` for every layer before `sliding_window_non_causal`.",
    )
    alias: Optional[str] = Field(
        None, pattern=r"^[a-z][a-z0-9_]*$",
        description="A name `draftsmith convert to=<alias>` resolves to this adapter (besides its own name); "
        "of the adapters sharing it, those of the drafter's family are candidates (then `with_heads`).",
    )
    with_heads: Optional[bool] = Field(
        None,
        description="With an alias shared by several adapters of one family: this one is picked when the "
        "drafter has (true) or lacks (false) a Markov or confidence head; unset: always.",
    )
    derived: dict[str, Literal["draft_vocab_size", "max_draft_len", "num_target_layers", "verifier",
                               "verifier_architectures"]] = Field(
        default_factory=dict,
        description="Keys of this format's `config.json` (dotted; an integer part indexes a list of the "
        "template) that an export derives from the drafter, never from the template: `draft_vocab_size` "
        "(the drafter's vocabulary), `max_draft_len` (tokens drafted per step), `num_target_layers` (the "
        "source's, else one past the deepest target layer id), `verifier` (the user's `verifier=`, else "
        "the source's; refused when neither), `verifier_architectures` (the source's, else []).",
    )
    markers: list[str] = Field(
        default_factory=list,
        description="Top-level keys that identify this format (`speculators_model_type`, `auto_map`, ...): "
        "an export from this format never carries them into another format.",
    )
    unsupported: list[Literal["swiglu_oai", "partial_rotary", "causal_windows", "heads", "target_hidden",
                              "mlp_bias", "mixed_causality", "conv_over_block"]] = Field(
        default_factory=list,
        description="Drafter features this format's own runtime cannot run; an export of a drafter using "
        "one is refused: `swiglu_oai` (the clamped OpenAI SwiGLU), `partial_rotary` (rotary_dim < "
        "head_dim), `causal_windows` (a causal sliding-window layer), `heads` (Markov or confidence head), "
        "`target_hidden` (a target hidden size other than the drafter's), `mlp_bias` (biases on the MLP's "
        "projections: transformers' `Qwen3MLP` has none), `mixed_causality` (layers of differing causality: "
        "vLLM's reader of the speculators format applies one causality to every layer), `conv_over_block` "
        "(a DFlash 2 `conv_kernel_size` larger than `block_size`: speculators' `GroupedDynamicCausalConv` "
        "refuses it).",
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
    shared_copies: dict[str, str] = Field(
        default_factory=dict,
        description="Tensors the writer saves in the drafter checkpoint as copies of the target's (e.g. DeepSpec's "
        "frozen `embed_tokens.weight`): source-checkpoint name -> the synthetic target's name "
        "(`model.embed_tokens.weight`, `lm_head.weight`). `synth` writes the target's tensor under the source "
        "name; conversion ignores them (`weights.shared_with_target`).",
    )
    layouts: dict[Literal["transformers4", "transformers5", "speculators"], dict[str, Any]] = Field(
        default_factory=dict,
        description="`synth layout=NAME`: the config layout of a real writer. Every adapter has "
        "`transformers4` (top-level `rope_theta`, `rope_scaling: null`, `torch_dtype`) and `transformers5` "
        "(`rope_parameters: {rope_theta, rope_type}`, `dtype`); a layout listed here also applies these "
        "dotted-key overrides afterwards (`speculators`: what speculators 0.9 `save_pretrained` writes, "
        "transformers-5 keys plus its model class as `architectures`; only adapters listing it have it).",
    )


class AdapterSpec(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Adapter name: the YAML file's stem (`x.yaml` holds `name: x`; anything else is refused, and a file that `extends:` another states its own name).")
    family: str = Field(description="Drafter family (closed registry), e.g. `gqa_dflash`.")
    description: str = Field("", description="One line about the drafter this adapter serves.")
    match: MatchSpec = Field(description="Which raw `config.json` files this adapter serves.")
    config: ConfigSpec = Field(default_factory=ConfigSpec, description="How `config.json` is flattened.")
    weights: WeightsSpec = Field(default_factory=WeightsSpec, description="How tensors are renamed and transformed.")
    attention: AttentionSpec = Field(
        default_factory=AttentionSpec, description="Masks and lowerings, resolved per layer."
    )
    layout: LayoutSpec = Field(default_factory=LayoutSpec,
                               description="Optional parts of the family's target layout (biases follow "
                               "the config's `attention_bias` / `mlp_bias`).")
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


#: the title of every JSON Schema draftsmith writes (how ``schema out=`` / ``docs`` know their own file).
SCHEMA_TITLE = "draftsmith adapter spec"


def json_schema() -> dict:
    """The JSON Schema of an adapter spec (for editors and `draftsmith schema`)."""
    schema = AdapterSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = SCHEMA_TITLE
    return schema


def is_schema_file(path) -> bool:
    """``path`` is a regular file (not a link) holding a JSON Schema draftsmith wrote (its
    title), read bounded: what ``schema out=`` / ``docs`` may replace."""
    if os.path.islink(path):
        return False
    try:
        data = load_json(path, MAX_CONFIG_BYTES, "a JSON Schema")
    except UserError:
        return False
    return isinstance(data, dict) and data.get("title") == SCHEMA_TITLE
