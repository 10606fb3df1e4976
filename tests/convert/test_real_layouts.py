"""Checkpoints in the layouts the real writers use convert exactly (issue: real checkpoints).

- transformers 5 and speculators 0.9 write the RoPE base only as
  ``rope_parameters.rope_theta`` (no top-level ``rope_theta``); transformers 4 writes the
  top-level key. Both must convert to the base the checkpoint states, and the drafted logits
  must match a float64 oracle run with *that* base (taken from the test, not from the
  converted config, so a wrong conversion cannot agree with itself).
- unsupported RoPE scaling is refused in one line; contradicting spellings too.
- a rename or transform rule that matches nothing is an error unless ``optional: true``.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.adapters import ADAPTER_DIR
from draftsmith.framework.cli.main import main
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.runtime.draft import run_draft
from draftsmith.framework.compile.adapter import load_adapter, route
from draftsmith.framework.compile.converted_config import flatten
from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.errors import UserError
from draftsmith.framework.convert.synth import layouts, synthesize
from support.helpers import read_checkpoint
from support.oracles import draft_oracle

ADAPTERS = sorted(p.stem for p in ADAPTER_DIR.glob("*.yaml"))
THETA = 123457.0  # no adapter's synth config, and no family default, uses this base


def rope_holder(raw: dict) -> dict:
    """The mapping of a raw config that holds the backbone's ``rope_theta`` (top or a section)."""
    if "rope_theta" in raw:
        return raw
    found = [v for v in raw.values() if isinstance(v, dict) and "rope_theta" in v]
    assert len(found) == 1, "expected rope_theta at the top level or in one section"
    return found[0]


def rewrite_config(folder, edit) -> None:
    p = folder / "config.json"
    raw = json.loads(p.read_text())
    edit(raw)
    p.write_text(json.dumps(raw, indent=2))


def set_theta(raw: dict) -> None:
    """Put the test's base wherever the writer's layout spells it (top-level or a section;
    ``rope_theta`` or ``rope_parameters.rope_theta``)."""
    for h in [raw, *(v for v in raw.values() if isinstance(v, dict))]:
        if "rope_theta" in h:
            h["rope_theta"] = THETA
        if isinstance(h.get("rope_parameters"), dict):
            h["rope_parameters"]["rope_theta"] = THETA


LAYOUT_CASES = [(n, l) for n in ADAPTERS for l in layouts(load_adapter(n)) if l != "spec"]


@pytest.mark.parametrize("name,layout", LAYOUT_CASES, ids=[f"{n}-{l}" for n, l in LAYOUT_CASES])
def test_rope_base_in_every_writer_layout(name, layout, tmp_path):
    """``synth layout=`` writes each real writer's layout (transformers 4 / 5, speculators 0.9);
    with a base no default has, the drafted logits match the float64 oracle run with it."""
    adapter = load_adapter(name)
    synthesize(adapter, "tiny", tmp_path / "S", seed=7, layout=layout)
    raw = json.loads((tmp_path / "S" / "config.json").read_text())
    text = json.dumps(raw)
    assert ('"rope_parameters"' in text) == (layout != "transformers4")
    assert ('"torch_dtype"' in text) == (layout == "transformers4") and ('"dtype"' in text) != ('"torch_dtype"' in text)
    if layout == "speculators":
        assert raw["architectures"][0].endswith("DraftModel") and "model_type" not in raw
        assert route(raw).name == name  # routes without adapter=
    rewrite_config(tmp_path / "S", set_theta)
    convert(adapter, tmp_path / "S", tmp_path / "T", progress=False)
    cfg, w = read_checkpoint(tmp_path / "T")
    assert cfg["rope_theta"] == THETA
    resolved = ResolvedDrafter.from_config(cfg)  # the compiled record names where the base came from
    assert resolved.rope.theta == THETA and resolved.rope.type == "default"
    src = resolved.sources["rope.theta"]
    assert src.startswith("config.json: ") and src.endswith("rope_theta")
    assert ("rope_parameters." in src) == (layout != "transformers4"), src
    dump = tmp_path / "step.safetensors"
    run_draft(tmp_path / "T", tmp_path / "S" / "target", device="cpu", context=23, seed=7, batch=1,
              dtype="float32", dump=dump)
    d = load_file(dump)
    tgt = load_file(tmp_path / "S" / "target" / "model.safetensors")
    oracle_cfg = copy.deepcopy(cfg)
    oracle_cfg["rope_theta"] = THETA  # the base the checkpoint states, from this test
    toks, logits, _ = draft_oracle(oracle_cfg, w, tgt, d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    got = d["outputs.logits"].double()
    assert torch.equal(torch.isfinite(got), torch.isfinite(logits)), f"{name}: candidate sets differ"
    seen = torch.isfinite(logits)  # a DFlash 2 selector's path logits are -inf off its candidates
    rel = ((got[seen] - logits[seen]).abs().max() / logits[seen].abs().max()).item()
    assert rel < 1e-4, f"{name}: logits off by {rel:.2e} relative"
    # the check can fail: the old silent default (10000) moves these logits past the bound
    oracle_cfg["rope_theta"] = 10000.0
    _, wrong, _ = draft_oracle(oracle_cfg, w, tgt, d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    ok = torch.isfinite(wrong)
    assert not torch.equal(ok, seen) or ((got[ok] - wrong[ok]).abs().max() / wrong[ok].abs().max()).item() > 1e-3


def flat(adapter_name: str, edit) -> dict:
    from draftsmith.framework.convert.synth import source_config

    a = load_adapter(adapter_name)
    raw = copy.deepcopy(source_config(a, "tiny"))
    edit(raw)
    return flatten(a, raw)


@pytest.mark.parametrize("scaling", [  # yarn, llama3, linear: implemented (tests/compile/test_rope_scaling.py)
    {"rope_type": "dynamic", "factor": 4.0},
    {"type": "longrope", "factor": 2.0, "short_factor": [1.0], "long_factor": [2.0]},
    {"rope_type": "su", "factor": 8.0},
])
def test_unsupported_rope_scaling_refused(scaling):
    def edit(raw):
        rope_holder(raw)["rope_scaling"] = scaling

    with pytest.raises(UserError) as e:
        flat("zlab_dflash", edit)
    (line,) = e.value.problems
    assert "rope_scaling" in line and "not supported" in line

    def edit5(raw):
        h = rope_holder(raw)
        h["rope_parameters"] = {"rope_theta": h.pop("rope_theta"), **scaling}
        h["rope_parameters"].setdefault("rope_type", h["rope_parameters"].pop("type", None))

    with pytest.raises(UserError, match="rope_parameters.rope_type .* not supported"):
        flat("speculators_dspark", edit5)


def test_contradicting_rope_spellings_refused():
    def edit(raw):
        h = rope_holder(raw)
        h["rope_parameters"] = {"rope_theta": h["rope_theta"] * 2, "rope_type": "default"}

    with pytest.raises(UserError, match="rope_theta is given twice"):
        flat("minimax_dspark", edit)


def test_missing_rope_base_refused():
    with pytest.raises(UserError, match="rope_theta is not set"):
        flat("zlab_dflash", lambda raw: rope_holder(raw).pop("rope_theta"))


def test_partial_rotary_factor_in_rope_parameters():
    def edit(raw):
        h = rope_holder(raw)
        h.pop("rotary_dim", None)
        h["rope_parameters"] = {"rope_theta": h.pop("rope_theta"), "rope_type": "default",
                                "partial_rotary_factor": 0.5}

    cfg = flat("trtllm_dflash", edit)
    assert cfg["rotary_dim"] == cfg["head_dim"] // 2
    # speculators' backbone ignores it (issue 37 point 2; tests/upstream/speculators/test_crosscheck_speculators_writer_forward.py)
    cfg = flat("speculators_dflash", edit)
    assert cfg["rotary_dim"] == cfg["head_dim"]
    assert set(ResolvedDrafter.from_config(cfg).writer_ignored) == {"rope_parameters.partial_rotary_factor"}


# --- rules that match nothing ---------------------------------------------------------------

def typo_spec(tmp_path, optional: bool):
    """The shipped spec with a typo that makes the whole MXFP8 rule match nothing."""
    text = (ADAPTER_DIR / "minimax_dspark.yaml").read_text()
    fixed = text.replace(r"mlp\.(gate|up|down)_proj)\.weight$'", r"mlp\.(gate|up|down)_prj)\.weight$'", 1)
    fixed = fixed.replace(r"self_attn\.[qkvo]_proj|", r"self_atn\.[qkvo]_proj|", 1)
    assert fixed.count("_prj") == 1 and "self_atn" in fixed
    if optional:  # restore the rule, and add one that matches nothing but is marked optional
        fixed = text.replace("  transforms:\n", "  transforms:\n    - {op: cast, match: '^mtp\\.', optional: true}\n", 1)
    p = tmp_path / "typo_dspark.yaml"
    p.write_text(fixed.replace("name: minimax_dspark", "name: typo_dspark"))
    return p


def test_typo_in_one_branch_of_a_norm_rule_refused(tmp_path, capsys):
    """The shipped rule folds ``hidden_norm`` and ``k_norm`` in one regex: a typo in the
    ``k_norm`` branch still matches ``hidden_norm``, so the norm coverage check catches it."""
    text = (ADAPTER_DIR / "minimax_dspark.yaml").read_text().replace("name: minimax_dspark", "name: branch_typo")
    spec = tmp_path / "branch_typo.yaml"
    spec.write_text(text.replace(r"self_attn\.k_norm)\.weight$'", r"self_attn\.k_nrm)\.weight$'", 1))
    assert spec.read_text() != text
    assert main(["inspect", f"adapter={spec}", f"source={tmp_path}"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "norm_fold_gemma covers" in line and "not k_norm" in line


def test_unmatched_transform_rule_refused(tmp_path, capsys):
    assert main(["synth", "adapter=minimax_dspark", f"out={tmp_path / 'S'}"]) == 0
    spec = typo_spec(tmp_path, optional=False)
    capsys.readouterr()
    assert main(["inspect", f"adapter={spec}", f"source={tmp_path / 'S'}"]) == 1
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if "UNMATCHED" in l)
    assert "_prj" in line and "matches no tensor" in line and "optional: true" in line
    n = next(i for i, l in enumerate(spec.read_text().splitlines(), 1) if "_prj" in l)
    assert re.search(rf"typo_dspark\.yaml:{n - 1}\b|typo_dspark\.yaml:{n}\b", line), line
    assert "closest: " in line
    assert main(["convert", f"adapter={spec}", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 2
    err = capsys.readouterr().err
    assert "UNMATCHED" in err and not (tmp_path / "T").exists()


def test_optional_rule_may_match_nothing(tmp_path, capsys):
    assert main(["synth", "adapter=minimax_dspark", f"out={tmp_path / 'S'}"]) == 0
    spec = typo_spec(tmp_path, optional=True)
    assert main(["convert", f"adapter={spec}", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 0


def test_unmatched_rename_rule_refused(tmp_path, capsys):
    assert main(["synth", "adapter=minimax_dspark", f"out={tmp_path / 'S'}"]) == 0
    text = (ADAPTER_DIR / "minimax_dspark.yaml").read_text().replace("name: minimax_dspark", "name: extra_rule")
    text = text.replace("  rename:\n", "  rename:\n    - {kind: prefix, match: \"model.mtp.\", to: \"\"}\n", 1)
    spec = tmp_path / "extra_rule.yaml"
    spec.write_text(text)
    capsys.readouterr()
    assert main(["inspect", f"adapter={spec}", f"source={tmp_path / 'S'}"]) == 1
    assert "weights.rename[0] | UNMATCHED" in capsys.readouterr().out
    spec.write_text(text.replace('to: ""}', 'to: "", optional: true}', 1))
    assert main(["inspect", f"adapter={spec}", f"source={tmp_path / 'S'}"]) == 0


def test_inspect_lists_defaults(tmp_path, capsys):
    """Every value that came from a spec or family default, not the checkpoint, is listed."""
    from draftsmith.framework.cli.main import main
    assert main(["synth", "adapter=zlab_dflash", f"out={tmp_path / 's'}"]) == 0
    capsys.readouterr()
    assert main(["inspect", f"source={tmp_path / 's'}"]) == 0
    out = capsys.readouterr().out
    block = out.split("defaults (not in config.json): ", 1)[1].split("values (source):", 1)[0]
    assert "heads.markov_rank = 0  (family gqa_dflash default)" in block
    assert "sample_from_anchor = False  (spec default (config.fields.dspark_config.sample_from_anchor.default))" in block
    assert "rope.type = default  (family gqa_dflash default)" in block
    assert "rope_theta" not in block and "rope.theta" not in block  # from config.json


def test_convert_lists_defaults(tmp_path, capsys):
    """``convert`` (text and ``format=json``, to=dflash and exports) lists every field that took
    a spec or family default: a math field (the RoPE base, removed from the checkpoint) and a
    flattened key outside the resolved fields (``sliding_window``) given a spec ``default:``."""
    assert main(["synth", "adapter=zlab_dflash", f"out={tmp_path / 's'}"]) == 0
    rewrite_config(tmp_path / "s", lambda raw: (raw.pop("rope_theta"), raw.pop("sliding_window")))
    text = (ADAPTER_DIR / "zlab_dflash.yaml").read_text().replace("name: zlab_dflash", "name: with_defaults")
    rule = "    dspark_config.sample_from_anchor: {default: false}"
    assert rule in text
    text = text.replace(rule, rule + "\n    rope_theta: {from: [rope_theta], default: 500000}"
                                     "\n    sliding_window: {from: [sliding_window], default: 24}", 1)
    spec = tmp_path / "with_defaults.yaml"
    spec.write_text(text)
    want = {
        "rope.theta": (500000.0, "spec default (config.fields.rope_theta.default)"),
        "config.sliding_window": (24, "spec default (config.fields.sliding_window.default)"),
        "sample_from_anchor": (False, "spec default (config.fields.dspark_config.sample_from_anchor.default)"),
        "heads.markov_rank": (0, "family gqa_dflash default"),
        "rope.type": ("default", "family gqa_dflash default"),
        "value_scale": (1.0, "family gqa_dflash default (no value scale)"),
    }
    capsys.readouterr()
    assert main(["convert", f"adapter={spec}", f"source={tmp_path / 's'}", f"out={tmp_path / 't'}"]) == 0
    out = capsys.readouterr().out
    block = out.split("defaults (not in config.json): ", 1)[1]
    count, *lines = block.strip().splitlines()
    assert int(count) == len(lines) == 11  # the six above, confidence(_with_markov), markov_head_type, rope.scaling,
    # mlp_bias (transformers' default false; attention_bias is in the config)
    for field, (value, source) in want.items():
        assert f"  {field} = {value}  ({source})" in lines, field
    assert not any(l.strip().startswith(("dims.", "block_size", "rms_norm_eps")) for l in lines)  # from config.json
    assert ResolvedDrafter.from_config(json.loads((tmp_path / "t" / "config.json").read_text())).rope.theta == 500000
    for extra in ([], ["to=speculators", "verifier=org/verifier"]):
        assert main(["convert", f"adapter={spec}", f"source={tmp_path / 's'}", f"out={tmp_path / 'j'}",
                     "format=json", "overwrite=true", *extra]) == 0
        rows = {r["field"]: (r["value"], r["source"]) for r in json.loads(capsys.readouterr().out)["defaults"]}
        assert len(rows) == 11 and all(rows[k] == v for k, v in want.items()), rows
    # a checkpoint that states every value: nothing defaulted but the family's absent heads
    rewrite_config(tmp_path / "s", lambda raw: raw.update(rope_theta=1e6, sliding_window=24))
    assert main(["convert", f"adapter={spec}", f"source={tmp_path / 's'}", f"out={tmp_path / 'u'}", "format=json"]) == 0
    rows = {r["field"] for r in json.loads(capsys.readouterr().out)["defaults"]}
    assert "rope.theta" not in rows and "config.sliding_window" not in rows and "sample_from_anchor" in rows
