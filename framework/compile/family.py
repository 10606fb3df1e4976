"""Drafter families (closed registry): the target layout a family's engines load.

A family knows, from a flattened config alone, every tensor of its target layout (name,
shape, dtype), which norms it has, how to fill config defaults, and ``max_draft_len``.
One family per architecture shape, shared by every adapter of that shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ...transforms.base import TensorMeta, dtype_from_name

from ...registry import Registry
from ..errors import UserError
from .dotted import get_dotted
from .rope import NOT_SCALING, SUPPORTED as ROPE_SUPPORTED, read_scaling

if TYPE_CHECKING:
    import torch


class GQADFlash:
    """GQA DFlash / DSpark drafters (section 1 of the drafter reference)."""

    name = "gqa_dflash"
    description = "GQA DFlash/DSpark block drafter (fc + hidden_norm context, non-causal block attention)"
    #: norm kind -> the tensor name template of layer 0 (or the only one)
    norm_kinds = {
        "input_layernorm": "layers.{i}.input_layernorm.weight",
        "post_attention_layernorm": "layers.{i}.post_attention_layernorm.weight",
        "q_norm": "layers.{i}.self_attn.q_norm.weight",
        "k_norm": "layers.{i}.self_attn.k_norm.weight",
        "hidden_norm": "hidden_norm.weight",
        "norm": "norm.weight",
    }
    #: config keys the family derives from others when the config lacks them
    derived = {"head_dim": "hidden_size / num_attention_heads",
               "rotary_dim": "head_dim (x partial_rotary_factor when given)",
               "target_hidden_size": "hidden_size"}
    #: flattened config keys the family reads (dotted; each covers its subtree). Together with
    #: a spec's ``config.fields`` aliases, ``dtype_keys``, ``fixed`` and ``irrelevant``, every key of
    #: a drafter config must be accounted for (``compile/keys.py``).
    consumes = (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "rotary_dim", "partial_rotary_factor", "intermediate_size", "vocab_size", "target_hidden_size",
        "rms_norm_eps", "hidden_act", "swiglu_alpha", "swiglu_limit",
        "rope_theta", "rope_parameters", "rope_scaling", "original_max_position_embeddings",  # compile/rope.py refuses unknown parameters
        "layer_types", "sliding_window", "use_sliding_window", "is_causal", "sliding_window_non_causal",
        "dflash_config.block_size", "dflash_config.mask_token_id", "dflash_config.target_layer_ids",
        "dflash_config.use_swa", "dflash_config.swa_window_size", "dflash_config.attention_value_scale",
        "dspark_config.markov_rank", "dspark_config.markov_head_type", "dspark_config.enable_confidence_head",
        "dspark_config.confidence_head_with_markov", "dspark_config.sample_from_anchor",
        "dspark_config.shift_label",  # TensorRT-LLM's spelling: must agree with sample_from_anchor
        "attention_bias", "mlp_bias",  # q/k/v/o and gate/up/down biases (target layout ``*.bias``)
    )
    #: keys transformers' ``PreTrainedConfig`` (4.57, 5.x) writes into every saved config that no
    #: drafter forward reads -> why (reported like a spec's ``config.irrelevant``)
    irrelevant = {
        "_name_or_path": "where transformers loaded the config from",
        "transformers_version": "the writer's version",
        "use_cache": "generation bookkeeping (the drafter's KV cache is the engine's)",
        "initializer_range": "training initialization",
        "attention_dropout": "dropout is inactive at inference",
        "bos_token_id": "tokenizer metadata", "eos_token_id": "tokenizer metadata", "pad_token_id": "tokenizer metadata",
        "chunk_size_feed_forward": "a memory/speed split of the MLP, same math",
        "id2label": "classification heads only", "label2id": "classification heads only",
        "problem_type": "classification heads only", "is_encoder_decoder": "false for every drafter",
        "output_attentions": "forward outputs", "output_hidden_states": "forward outputs", "return_dict": "forward outputs",
        "tie_word_embeddings": "the drafter holds no embedding or LM head (both are the target's)",
        "max_position_embeddings": "sizes a reader's RoPE table (TensorRT-LLM's DFlash also its context buffers, to "
                                   "min(max_seq_len, it)); every position below it is computed exactly",
        "num_target_layers": "the target's depth: z-lab and SGLang derive target_layer_ids from it only when "
                             "none are given (they are required here); exports keep it",
        "max_window_layers": "Qwen3Config derives layer_types from it only when they are absent "
                             "(attention.hf_window_switch then refuses use_sliding_window)",
        # attention backend choices: which kernel computes the same attention (the mask and the
        # lowering are the record's, from the layer types, windows and causality keys)
        "_attn_implementation": "transformers' attention kernel choice (eager, sdpa, flash, flex): same attention",
        "attn_implementation": "transformers' attention kernel choice (eager, sdpa, flash, flex): same attention",
        "_attn_implementation_autoset": "transformers' record that it picked the attention kernel itself",
        "flex_attention_backend": "the kernel a training run used for flex attention (the Kimi-K3 DSpark "
                                  "speculator's transformer_layer_config carries it): same attention",
        # library bookkeeping and training-only switches
        "_commit_hash": "the hub commit transformers loaded the config from",
        "gradient_checkpointing": "recomputes activations in training backward passes: same forward",
        "dropout": "dropout is inactive at inference",
        "hidden_dropout": "dropout is inactive at inference",
    }
    #: keys no forward reads that exports keep: the target's depth (readers derive layer ids from it
    #: when none are given) and the RoPE table size (z-lab's MLX loader requires it)
    carried = ("num_target_layers", "max_position_embeddings")
    #: keys whose value the family's math hard-codes: any other value is refused
    fixed: dict[str, Any] = {}
    #: the lowering table a new spec of this family starts from (``draftsmith init`` writes it):
    #: layer kind -> device class -> lowering; on GPUs the one Triton kernel (its Gluon variant on
    #: SM90), which computes every mask of reference section 2 (windowed or full, causal or not)
    lowering = {kind: {"sm100": "triton_window_block", "sm90": "triton_window_block", "cpu": "dense"}
                for kind in ("windowed", "full")}
    #: boolean keys the family reads with transformers' default when absent (``LlamaConfig``,
    #: ``Qwen3Config``: ``attention_bias`` and ``mlp_bias`` default false): key -> default
    bias_keys = {"attention_bias": False, "mlp_bias": False}
    required = (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "intermediate_size", "vocab_size", "dflash_config.block_size",
        "dflash_config.mask_token_id", "dflash_config.target_layer_ids",
    )

    def complete(self, cfg: dict[str, Any]) -> None:
        """Fill family defaults in place and check what the family needs (shape invariants such as
        heads dividing and ``rotary_dim <= head_dim`` are the record's: :class:`~.resolved.Dims`)."""
        missing = [k for k in self.required if get_dotted(cfg, k) is None]
        if missing:
            raise UserError(f"config: missing {', '.join(missing)} (needed by family {self.name})")
        if cfg.get("head_dim") is None:  # the transformers convention, not a guess
            cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
        self.complete_rope(cfg)
        if cfg.get("target_hidden_size") is None:
            cfg["target_hidden_size"] = cfg["hidden_size"]
        for key in ("rms_norm_eps", "hidden_act"):
            if cfg.get(key) is None:
                raise UserError(f"config: {key} is not set (give it in the checkpoint, or as a `default:` "
                                f"in the spec's config.fields)")
        if cfg["hidden_act"] == "swigluoai":
            for key in ("swiglu_alpha", "swiglu_limit"):
                if cfg.get(key) is None:
                    raise UserError(f"config: hidden_act swigluoai needs {key} (give it in the checkpoint, "
                                    f"or as a `default:` in the spec's config.fields)")
        for key, default in self.bias_keys.items():
            if cfg.get(key) is None:
                cfg[key] = default
        ds = cfg.setdefault("dspark_config", {})
        ds.setdefault("markov_rank", 0)
        ds.setdefault("markov_head_type", "vanilla")
        ds.setdefault("enable_confidence_head", False)
        ds.setdefault("confidence_head_with_markov", False)
        ds.setdefault("sample_from_anchor", False)

    #: rope types the host implements (``compile/rope.py`` lists what each needs)
    rope_types = ROPE_SUPPORTED

    def complete_rope(self, cfg: dict[str, Any]) -> None:
        """RoPE base, type, scaling and rotary dim from either config layout, refusing what is unsupported.

        transformers 4 writes top-level ``rope_theta`` / ``rope_scaling`` /
        ``partial_rotary_factor``; transformers 5 (and speculators 0.9) write
        ``rope_parameters.{rope_theta, rope_type, partial_rotary_factor, ...}``. Both are read;
        two different values for one quantity are refused. The flattened config carries
        ``rope_theta`` at the top level; the scaling parameters are checked here
        (:meth:`rope_scaling`) and read again by the resolver.
        """
        rp, rs = _rope_blocks(cfg)
        where, theta = _one("rope_theta", ("rope_theta", cfg.get("rope_theta")),
                            ("rope_parameters.rope_theta", rp.get("rope_theta")), number=True)
        if theta is None:
            raise UserError("config: rope_theta is not set (neither rope_theta nor rope_parameters.rope_theta; "
                            "give it as a `default:` in the spec's config.fields if the drafter's trainer fixed it)")
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise UserError(f"config: {where} must be a positive number, found {theta!r}")
        cfg["rope_theta"] = float(theta)
        self.rope_scaling(cfg)
        where, factor = _one("partial_rotary_factor", ("partial_rotary_factor", cfg.get("partial_rotary_factor")),
                            ("rope_parameters.partial_rotary_factor", rp.get("partial_rotary_factor")), number=True)
        d = cfg["head_dim"]
        if cfg.get("rotary_dim") is None:
            if factor is not None and not (isinstance(factor, (int, float)) and 0 < factor <= 1):
                raise UserError(f"config: {where} must be in (0, 1], found {factor!r}")
            cfg["rotary_dim"] = int(d * factor) if factor is not None else d
        elif factor is not None and int(d * factor) != cfg["rotary_dim"]:
            raise UserError(f"config: rotary_dim {cfg['rotary_dim']} contradicts {where} {factor} (head_dim {d})")

    def rope_scaling(self, cfg: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
        """``(rope_type, scaling parameters, their sources)`` of a config (``default``, {}, {}
        without scaling). The type comes from ``rope_scaling.rope_type|type`` or
        ``rope_parameters.rope_type`` (contradicting spellings refused); the parameters from the
        block that states a scaled type (both blocks with different parameters: refused).
        ``sources`` names, per parameter not read from the checkpoint, its documented default
        or derivation (see ``compile/rope.py``)."""
        rp, rs = _rope_blocks(cfg)
        where, rtype = _one("rope_type", ("rope_scaling.rope_type", rs.get("rope_type")),
                            ("rope_scaling.type", rs.get("type")), ("rope_parameters.rope_type", rp.get("rope_type")))
        if rtype is None and rs:
            raise UserError(f"config: rope_scaling {rs!r} has no rope_type")
        rtype = "default" if rtype is None else rtype
        if rtype not in self.rope_types:
            raise UserError(f"config: {where} {rtype!r} is not supported (supported: {', '.join(self.rope_types)}); "
                            "converting it would change the drafter's positions")
        scaled = [(name, b) for name, b in (("rope_parameters", rp), ("rope_scaling", rs))
                  if any(k not in NOT_SCALING for k in b)]
        if len(scaled) == 2 and {k: v for k, v in rp.items() if k not in NOT_SCALING} != \
                {k: v for k, v in rs.items() if k not in NOT_SCALING}:
            raise UserError("config: rope_parameters and rope_scaling give different scaling parameters")
        name, block = scaled[0] if scaled else ((where or "rope_parameters").split(".")[0], {})
        params, sources = read_scaling(rtype, block, name, cfg.get("original_max_position_embeddings"),
                                       cfg.get("rope_theta"))
        return rtype, params, sources

    def mirror(self, cfg: dict[str, Any]) -> None:
        """Copies TensorRT-LLM's DFlash loader reads at the top level (``block_size``)."""
        cfg["block_size"] = cfg["dflash_config"]["block_size"]

    #: record field (dotted, under ``dflash2``) -> the flattened key it is read from (none for DFlash)
    dflash2_keys: dict[str, str] = {}

    def dflash2(self, cfg: dict[str, Any]) -> Optional[dict[str, Any]]:
        """The record's ``dflash2`` section of a completed config (None: not DFlash 2)."""
        return None

    def target_layout(self, cfg: dict[str, Any]) -> dict[str, TensorMeta]:
        """Every tensor the converted checkpoint holds, in a fixed order: ``*.bias`` of
        q/k/v/o_proj when ``attention_bias``, of gate/up/down_proj when ``mlp_bias`` (flattened
        keys, transformers' meaning), ``self_attn.{q,k}_norm.weight`` unless the compiled
        section's ``qk_norm`` is false (the spec's ``layout.qk_norm``)."""
        dt = dtype_from_name(cfg.get("torch_dtype", "bfloat16"))
        attn_bias, mlp_bias = bool(cfg.get("attention_bias")), bool(cfg.get("mlp_bias"))
        qk_norm = (cfg.get("draftsmith") or {}).get("qk_norm", True)
        h, hq, hkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        ff, v = cfg["intermediate_size"], cfg["vocab_size"]
        n_in = len(cfg["dflash_config"]["target_layer_ids"]) * cfg["target_hidden_size"]
        m = lambda *shape: TensorMeta(tuple(shape), dt)  # noqa: E731
        out = {"fc.weight": m(h, n_in), "hidden_norm.weight": m(h)}
        for i in range(cfg["num_hidden_layers"]):
            p = f"layers.{i}."
            out[p + "input_layernorm.weight"] = m(h)
            out[p + "self_attn.q_proj.weight"] = m(hq * d, h)
            out[p + "self_attn.k_proj.weight"] = m(hkv * d, h)
            out[p + "self_attn.v_proj.weight"] = m(hkv * d, h)
            out[p + "self_attn.o_proj.weight"] = m(h, hq * d)
            if attn_bias:
                out[p + "self_attn.q_proj.bias"] = m(hq * d)
                out[p + "self_attn.k_proj.bias"] = m(hkv * d)
                out[p + "self_attn.v_proj.bias"] = m(hkv * d)
                out[p + "self_attn.o_proj.bias"] = m(h)
            if qk_norm:
                out[p + "self_attn.q_norm.weight"] = m(d)
                out[p + "self_attn.k_norm.weight"] = m(d)
            out[p + "post_attention_layernorm.weight"] = m(h)
            out[p + "mlp.gate_proj.weight"] = m(ff, h)
            out[p + "mlp.up_proj.weight"] = m(ff, h)
            out[p + "mlp.down_proj.weight"] = m(h, ff)
            if mlp_bias:
                out[p + "mlp.gate_proj.bias"] = m(ff)
                out[p + "mlp.up_proj.bias"] = m(ff)
                out[p + "mlp.down_proj.bias"] = m(h)
        out["norm.weight"] = m(h)
        ds = cfg["dspark_config"]
        r = ds["markov_rank"]
        if r:
            out["markov_head.markov_w1.weight"] = m(v, r)
            out["markov_head.markov_w2.weight"] = m(v, r)
        if ds["enable_confidence_head"]:
            extra = r if ds["confidence_head_with_markov"] else 0
            out["confidence_head.proj.weight"] = m(1, h + extra)
            out["confidence_head.proj.bias"] = m(1)
        return out

    def sample(self, name: str, meta: TensorMeta, gen: torch.Generator) -> torch.Tensor:
        """Random values for a target tensor no transform samples, at scales where every stage
        moves the output: norms near 1, a linear ``[out, in]`` at ``1/sqrt(in)`` (activations
        stay near unit RMS through every layer, so rope, masks and norms all matter), the Markov
        factors at 1 (the bias ``w2 @ w1[prev]`` has RMS ``sqrt(rank)``, the size of the logits)."""
        import torch

        return (synth_scale(name, meta.shape) * torch.randn(meta.shape, generator=gen)
                + (1.0 if is_norm(name) else 0.0)).to(meta.dtype)

    def borrowed_layout(self, cfg: dict[str, Any]) -> dict[str, TensorMeta]:
        """The target's tensors the drafter borrows (written by ``synth`` under ``target/``)."""
        dt = dtype_from_name(cfg.get("torch_dtype", "bfloat16"))
        v, ht = cfg["vocab_size"], cfg["hidden_size"]
        return {"model.embed_tokens.weight": TensorMeta((v, ht), dt), "lm_head.weight": TensorMeta((v, ht), dt)}


def _rope_blocks(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(rope_parameters, rope_scaling)`` of a config, each ``{}`` when absent or null."""
    rp, rs = cfg.get("rope_parameters"), cfg.get("rope_scaling")
    for key, v in (("rope_parameters", rp), ("rope_scaling", rs)):
        if v is not None and not isinstance(v, dict):
            raise UserError(f"config: {key} must be a mapping, found {type(v).__name__}")
    return rp or {}, rs or {}


def _one(key: str, *spellings: tuple[str, Any], number: bool = False):
    """``(where, value)`` of the one value ``spellings`` give for ``key`` (``(None, None)``
    without any); different values are refused. ``number``: the key is declared a number, so
    JSON ``1000000`` and ``1000000.0`` are one value (compared as floats); otherwise values
    compare with their type (``"1"`` is not ``1``, ``true`` is not ``1``)."""
    found = [(where, v) for where, v in spellings if v is not None]
    if len({_value_key(v, number) for _, v in found}) > 1:
        raise UserError(f"config: {key} is given twice with different values: "
                        + ", ".join(f"{w}={v!r}" for w, v in found))
    return found[0] if found else (None, None)


def _value_key(v: Any, number: bool) -> tuple[str, Any]:
    """What ``_one`` compares: a number of a key declared numeric as a float, else type and repr."""
    if number and type(v) in (int, float):
        return ("number", float(v))
    return (type(v).__name__, repr(v))


#: DFlash 2's structural ``dflash_config`` keys: required, no default is safe (docs/dflash2-reference.md
#: section 7 row 9: TensorRT-LLM refuses their absence, vLLM raises, speculators defaults them)
DFLASH2_STRUCTURE = ("dflash_config.conv_kernel_size", "dflash_config.conv_group_size",
                     "dflash_config.selector_rank", "dflash_config.selector_top_k")
#: DFlash 2's math knobs read by z-lab and vLLM (not by TensorRT-LLM at d70a2287): from the config or an
#: explicit spec default (``config.fields``), never a family default
DFLASH2_KNOBS = ("dflash_config.output_multiplier", "dflash_config.final_logit_softcapping",
                 "dflash_config.input_embedding_scale")
#: where the record's unary order and chain come from: flattened keys only a spec's ``config.fields``
#: default sets (no published config spells them; section 7 rows 2-3)
DFLASH2_CHOICES = ("dflash_config.selector_unary_order", "dflash_config.selector_chain")


class GQADFlash2(GQADFlash):
    """GQA DFlash 2 drafters (docs/dflash2-reference.md): the DFlash block decode plus a grouped
    block convolution around every sublayer and the pairwise candidate selector.

    Target layout: the DFlash set plus ``layers.{i}.{attention_conv,mlp_conv}.base_kernel [2, T, h]``,
    ``.kernel_projection.weight [2*T*G, h]`` (``G = h / conv_group_size``),
    ``candidate_selector.hidden_projection.weight [r, h]`` and the bare codebooks
    ``candidate_selector.{predecessor,successor}_codebook [V, r]`` (TensorRT-LLM's names).
    """

    name = "gqa_dflash2"
    description = ("GQA DFlash 2 block drafter (DFlash plus grouped block convolutions and the pairwise "
                   "candidate selector)")
    consumes = GQADFlash.consumes + DFLASH2_STRUCTURE + DFLASH2_KNOBS + DFLASH2_CHOICES
    required = GQADFlash.required + DFLASH2_STRUCTURE

    def complete(self, cfg: dict[str, Any]) -> None:
        """DFlash's completion, then DFlash 2's refusals: slot 0 never drafts (the selector's
        positions are slots ``1..K``: TensorRT-LLM ``_draft_slot_ids``, z-lab's generator) and no
        DSpark head (no source combines them)."""
        structure = [k for k in DFLASH2_STRUCTURE if get_dotted(cfg, k) is None]
        if structure:
            raise UserError(f"config: missing {', '.join(structure)} (needed by family {self.name}; DFlash 2's "
                            "structure has no safe default)")
        knobs = [k for k in DFLASH2_KNOBS + DFLASH2_CHOICES if get_dotted(cfg, k) is None]
        if knobs:
            raise UserError(f"config: missing {', '.join(knobs)} (needed by family {self.name}: they change the "
                            "selector's math; give them in the checkpoint or as a `default:` in the spec's "
                            "config.fields)")
        super().complete(cfg)
        ds = cfg["dspark_config"]
        if ds["sample_from_anchor"]:
            raise UserError("config: sample_from_anchor true: family gqa_dflash2 drafts from block slots 1..K only "
                            "(TensorRT-LLM _draft_slot_ids, z-lab dflash_generate); slot 0 holds the anchor")
        if ds["markov_rank"] or ds["enable_confidence_head"]:
            raise UserError("config: a DSpark Markov or confidence head with DFlash 2 is not supported "
                            "(no source defines the combination)")

    dflash2_keys = {
        "dflash2.conv.kernel_size": "dflash_config.conv_kernel_size",
        "dflash2.conv.group_size": "dflash_config.conv_group_size",
        "dflash2.selector.rank": "dflash_config.selector_rank",
        "dflash2.selector.top_k": "dflash_config.selector_top_k",
        "dflash2.selector.unary.multiplier": "dflash_config.output_multiplier",
        "dflash2.selector.unary.softcap": "dflash_config.final_logit_softcapping",
        "dflash2.selector.unary.order": "dflash_config.selector_unary_order",
        "dflash2.selector.chain": "dflash_config.selector_chain",
        "dflash2.input_embedding_scale": "dflash_config.input_embedding_scale",
    }

    def dflash2(self, cfg: dict[str, Any]) -> Optional[dict[str, Any]]:
        """``conv``, ``selector``, ``input_embedding_scale`` from ``dflash_config`` (validated by the
        record). ``final_logit_softcapping`` 0 reads as no cap, as its writers read it (z-lab and
        vLLM cap only when it is ``> 0``); a negative one is refused by the record."""
        dc = cfg["dflash_config"]
        return dict(
            conv=dict(kernel_size=dc["conv_kernel_size"], group_size=dc["conv_group_size"]),
            selector=dict(rank=dc["selector_rank"], top_k=dc["selector_top_k"],
                          unary=dict(multiplier=dc["output_multiplier"],
                                     softcap=softcap(dc["final_logit_softcapping"]),
                                     order=dc["selector_unary_order"]),
                          chain=dc["selector_chain"]),
            input_embedding_scale=dc["input_embedding_scale"],
        )

    def target_layout(self, cfg: dict[str, Any]) -> dict[str, TensorMeta]:
        """DFlash's tensors, each layer's convolutions after its own, then the selector."""
        base = super().target_layout(cfg)
        dt = dtype_from_name(cfg.get("torch_dtype", "bfloat16"))
        dc = cfg["dflash_config"]
        h, v = cfg["hidden_size"], cfg["vocab_size"]
        taps, groups, rank = dc["conv_kernel_size"], h // dc["conv_group_size"], dc["selector_rank"]
        out: dict[str, TensorMeta] = {}
        for name, meta in base.items():
            out[name] = meta
            if name.endswith(".mlp.down_proj.weight"):
                p = name.removesuffix("mlp.down_proj.weight")
                for conv in ("attention_conv", "mlp_conv"):
                    out[p + conv + ".base_kernel"] = TensorMeta((2, taps, h), dt)
                    out[p + conv + ".kernel_projection.weight"] = TensorMeta((2 * taps * groups, h), dt)
        out["candidate_selector.hidden_projection.weight"] = TensorMeta((rank, h), dt)
        out["candidate_selector.predecessor_codebook"] = TensorMeta((v, rank), dt)
        out["candidate_selector.successor_codebook"] = TensorMeta((v, rank), dt)
        return out

    def sample(self, name: str, meta: TensorMeta, gen: torch.Generator) -> torch.Tensor:
        """DFlash's draws, and for DFlash 2's tensors values far from the identity convolution
        (which would hide the convolutions from a test): base kernels ``N(1, 0.3)`` at tap 0 and
        ``N(0, 0.5)`` at earlier taps, kernel projections at ``0.5/sqrt(h)`` (coefficients of RMS
        about 0.5 on normed rows), codebooks at ``r^-1/4`` (the pairwise term has RMS about 1,
        the size of the scaled unary scores)."""
        import torch

        if name.endswith(".base_kernel"):
            t = 0.5 * torch.randn(meta.shape, generator=gen)
            t[:, 0] = 1.0 + 0.3 * torch.randn(t[:, 0].shape, generator=gen)
            return t.to(meta.dtype)
        if name.endswith(".kernel_projection.weight"):
            return (0.5 * meta.shape[-1] ** -0.5 * torch.randn(meta.shape, generator=gen)).to(meta.dtype)
        if name.endswith("_codebook"):
            return (meta.shape[-1] ** -0.25 * torch.randn(meta.shape, generator=gen)).to(meta.dtype)
        return super().sample(name, meta, gen)


def softcap(cap: Any) -> Any:
    """``final_logit_softcapping`` as the record stores it: 0 reads as no cap (None), as its
    writers read it (z-lab and vLLM cap only when it is ``> 0``); anything else as given."""
    return None if type(cap) in (int, float) and cap == 0 else cap


FAMILIES: Registry[GQADFlash] = Registry("family")
FAMILIES.register(GQADFlash.name, GQADFlash())
FAMILIES.register(GQADFlash2.name, GQADFlash2())


def get_family(name: str) -> GQADFlash:
    """The family named ``name``; an unknown name lists the known ones."""
    return FAMILIES.lookup(name)


def is_norm(name: str) -> bool:
    return name.endswith("norm.weight") or name.endswith("layernorm.weight")


def synth_scale(name: str, shape) -> float:
    """Standard deviation ``synth`` draws target tensor ``name`` with (see ``GQADFlash.sample``);
    a norm's is its spread around 1."""
    if is_norm(name) or name.endswith(".bias"):
        return 0.1
    if "markov_head." in name:
        return 1.0
    return float(shape[-1]) ** -0.5 if len(shape) == 2 else 0.02
