"""DFlash 2 end to end on the reference host (docs/dflash2-reference.md section 9): the tiny
synthetic z-lab / inco checkpoint (``adapters/zlab_dflash2.yaml``), converted, drafts what the
float64 oracle (``oracles.draft_oracle`` on ``oracles_dflash2``) drafts, with and without the
candidate selector; a planted error in any convolution or selector weight, in the convolution's
channel grouping or in the selector's predecessors is seen; DFlash 2's keys are refused in one
line when absent or out of range; the codebooks are read with or without ``.weight``."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.converted_config import compile_config, flatten
from draftsmith.framework.compile.resolve import resolve
from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.convert.synth import source_config
from draftsmith.framework.errors import UserError
from draftsmith.framework.runtime import dflash2 as host2
from draftsmith.framework.runtime.dflash import DFlashDraftModel
from support.helpers import fake_target, read_checkpoint
from support.oracles import draft_oracle

NAME = "zlab_dflash2"
CONTEXT = 13
ANCHORS = (17, 201)


@pytest.fixture(scope="module")
def case(checkpoints):
    """The converted checkpoint, its target, a random context per sequence and the oracle's
    drafts (selector on and off) of the true weights."""
    ck = checkpoints(NAME)
    cfg, w = read_checkpoint(ck.converted)
    tgt = load_file(ck.target / "model.safetensors")
    r = ResolvedDrafter.from_config(cfg)
    g = torch.Generator().manual_seed(5)
    hidden = [torch.randn(CONTEXT, r.dims.num_target_layers * r.dims.target_hidden, generator=g) for _ in ANCHORS]
    want = {sel: [draft_oracle(cfg, w, tgt, h.double(), a, selector=sel)[:2] for h, a in zip(hidden, ANCHORS)]
            for sel in (True, False)}
    return dict(cfg=cfg, w=w, tgt=tgt, r=r, hidden=hidden, want=want)


def _host(c, weights=None, selector=True):
    """One float32 draft step of both sequences on the host with ``weights`` (default the
    converted ones): ``DraftOutput``."""
    model = DFlashDraftModel(c["r"], dtype=torch.float32)
    model.load_weights(c["w"] if weights is None else weights)
    model.load_weights_from_target_model(fake_target(c["tgt"]["model.embed_tokens.weight"], c["tgt"]["lm_head.weight"]))
    cache = model.make_cache(len(ANCHORS), max_context=CONTEXT)
    for n, h in enumerate(c["hidden"]):
        model.append_context(cache, h, seq=n)
    return model.draft(torch.tensor(ANCHORS), cache, selector=selector)


def _off(out, want) -> float:
    """How far the host's drafts are from the oracle's: inf when a token or a candidate set
    differs, else the largest relative difference of the logits where they are finite."""
    worst = 0.0
    for n, (toks, rows) in enumerate(want):
        got = out.logits[n].double()
        seen = torch.isfinite(rows)
        if out.tokens[n].tolist() != toks.tolist() or not torch.equal(torch.isfinite(got), seen):
            return float("inf")
        worst = max(worst, ((got[seen] - rows[seen]).abs().max() / rows[seen].abs().max()).item())
    return worst


@pytest.mark.parametrize("selector", [True, False])
def test_host_equals_oracle(case, selector):
    """Tokens, path logits (the realized rows at the candidates, -inf elsewhere) or plain logits."""
    out = _host(case, selector=selector)
    assert _off(out, case["want"][selector]) < 1e-5
    if selector:
        assert out.selector is not None and out.selector.candidates.shape == (2, case["r"].max_draft_len, 4)
        for n, (_, rows) in enumerate(case["want"][True]):  # realized rows = the path logits at the candidates
            torch.testing.assert_close(out.selector.realized[n].double(),
                                       rows.gather(-1, out.selector.candidates[n]), rtol=1e-5, atol=1e-5)
    else:
        assert out.selector is None


def test_selector_changes_the_draft(case):
    """The synthetic weights are such that the selector's path is not the plain argmax (else the
    comparisons above could not tell the two apart)."""
    on = [t.tolist() for t, _ in case["want"][True]]
    off = [t.tolist() for t, _ in case["want"][False]]
    assert on != off


PLANTED = [f"layers.{i}.{c}.{t}" for i in range(2) for c in ("attention_conv", "mlp_conv")
           for t in ("base_kernel", "kernel_projection.weight")] + [
    "candidate_selector.hidden_projection.weight", "candidate_selector.predecessor_codebook",
    "candidate_selector.successor_codebook"]


@pytest.mark.parametrize("name", PLANTED)
def test_planted_weight_error_caught(case, name):
    """Every convolution and selector tensor moves the draft: a small perturbation of it after
    conversion takes the host away from the oracle of the true weights."""
    w = dict(case["w"])
    g = torch.Generator().manual_seed(hash(name) % 1000)
    t = w[name].clone()
    w[name] = t + 0.05 * t.std() * torch.randn(t.shape, generator=g)
    assert _off(_host(case, w), case["want"][True]) > 1e-3


def test_wrong_group_mapping_caught(case, monkeypatch):
    """Channels grouped ``c % G`` instead of ``c // g``: the convolution's output differs."""
    monkeypatch.setattr(host2, "group_index", lambda h, g, device=None: torch.arange(h, device=device) % (h // g))
    assert _off(_host(case, selector=False), case["want"][False]) > 1e-3


def test_shifted_predecessors_caught(case, monkeypatch):
    """The selector conditioning step ``j`` on the anchor instead of step ``j-1``'s candidates."""
    monkeypatch.setattr(host2, "predecessor_ids",
                        lambda ids, anchors: anchors.to(ids.dtype)[:, None, None].expand(ids.shape).clone())
    assert _off(_host(case), case["want"][True]) > 1e-3


# ------------------------------------------------------------------ config refusals and sources


def _raw(edit=None) -> dict:
    raw = copy.deepcopy(source_config(load_adapter(NAME), "tiny"))
    if edit:
        edit(raw)
    return raw


def _refused(raw, adapter=None) -> str:
    with pytest.raises(UserError) as e:
        compile_config(adapter or load_adapter(NAME), raw)
    assert len(e.value.problems) == 1, e.value.problems
    return e.value.problems[0]


@pytest.mark.parametrize("key", ["conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"])
def test_absent_structure_key_refused(key):
    line = _refused(_raw(lambda r: r["dflash_config"].pop(key)))
    assert f"dflash_config.{key}" in line


@pytest.mark.parametrize("key", ["conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"])
def test_absent_structure_key_refused_by_family(key, tmp_path):
    """Without the spec's `required: true` the family still refuses (no default is safe)."""
    text = load_adapter(NAME).path.read_text().replace(
        f"dflash_config.{key}: {{from: [dflash_config.{key}, {key}], required: true}}",
        f"dflash_config.{key}: {{from: [dflash_config.{key}, {key}]}}")
    (tmp_path / f"{NAME}.yaml").write_text(text)
    line = _refused(_raw(lambda r: r["dflash_config"].pop(key)), load_adapter(str(tmp_path / f"{NAME}.yaml")))
    assert f"missing dflash_config.{key}" in line and "no safe default" in line


@pytest.mark.parametrize("field", ["output_multiplier", "final_logit_softcapping", "input_embedding_scale",
                                   "selector_unary_order", "selector_chain"])
def test_math_knob_needs_config_or_spec_default(field, tmp_path):
    """A spec without a default for a math knob, and a config without it: refused in one line."""
    lines = load_adapter(NAME).path.read_text().splitlines()
    text = "\n".join(l for l in lines if not l.strip().startswith(f"dflash_config.{field}:"))
    (tmp_path / f"{NAME}.yaml").write_text(text + "\n")
    line = _refused(_raw(lambda r: r["dflash_config"].pop(field, None)), load_adapter(str(tmp_path / f"{NAME}.yaml")))
    assert f"dflash_config.{field}" in line and "spec's config.fields" in line


@pytest.mark.parametrize("edit,named", [
    (lambda r: r["dflash_config"].update(selector_top_k=1), "dflash_config.selector_top_k"),
    (lambda r: r["dflash_config"].update(conv_kernel_size=2.0), "dflash_config.conv_kernel_size"),
    (lambda r: r["dflash_config"].update(conv_group_size=48), "conv_group_size 48 does not divide hidden_size 128"),
    (lambda r: r["dflash_config"].update(output_multiplier=-1.0), "dflash_config.output_multiplier"),
    (lambda r: r["dflash_config"].update(final_logit_softcapping=-3.0), "dflash_config.final_logit_softcapping"),
    (lambda r: r["dflash_config"].update(conv_bias=True), "dflash_config.conv_bias: not read"),
])
def test_bad_values_refused(edit, named):
    assert named in _refused(_raw(edit))


def test_sample_from_anchor_refused_by_family():
    from draftsmith.framework.compile.family import get_family
    cfg = flatten(load_adapter(NAME), _raw())
    cfg["dspark_config"]["sample_from_anchor"] = True
    with pytest.raises(UserError) as e:
        get_family("gqa_dflash2").complete(cfg)
    assert len(e.value.problems) == 1 and "slots 1..K only" in e.value.problems[0]


def test_sources_reported():
    """Every DFlash 2 field has a source; the z-lab writer's choices are spec defaults, shown as such;
    a softcap of 0 reads as none, a top-level key as z-lab's fallback spelling."""
    r = resolve(load_adapter(NAME), _raw())
    fields = [k for k in r.sources if k.startswith("dflash2.")]
    assert len(fields) == 9
    assert r.sources["dflash2.selector.unary.order"].startswith("spec default (config.fields.dflash_config.selector")
    assert r.sources["dflash2.selector.chain"].startswith("spec default")
    assert r.sources["dflash2.conv.kernel_size"] == "config.json: dflash_config.conv_kernel_size"

    def top(raw):
        raw["selector_rank"] = raw["dflash_config"].pop("selector_rank")
        raw["dflash_config"]["final_logit_softcapping"] = 0
    r = resolve(load_adapter(NAME), _raw(top))
    assert r.dflash2.selector.rank == 16 and r.sources["dflash2.selector.rank"] == "config.json: selector_rank"
    assert r.dflash2.selector.unary.softcap is None


def test_codebooks_with_weight_suffix(checkpoints, tmp_path):
    """A checkpoint saved from the module (codebooks as ``.weight``) converts to the same tensors."""
    ck = checkpoints(NAME)
    src = tmp_path / "S"
    shutil.copytree(ck.source, src)
    t = load_file(src / "model.safetensors")
    t = {(k + ".weight" if k.endswith("_codebook") else k): v for k, v in t.items()}
    save_file(t, str(src / "model.safetensors"), metadata={"format": "pt"})
    out = convert(load_adapter(NAME), src, tmp_path / "T", progress=False)
    _, got = read_checkpoint(out)
    _, want = read_checkpoint(ck.converted)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


# ------------------------------------------------------------------ CLI


def test_cli_draft_selector_flag(capsys):
    args = ["draft", f"adapter={NAME}", "context=9", "seed=4", "format=json"]
    assert main(args) == 0
    on = json.loads(capsys.readouterr().out)
    assert main(args + ["selector=false"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert on["selector"] is True and off["selector"] is False
    assert main(["draft", "adapter=zlab_dflash", "context=9", "selector=false"]) == 2
    assert "selector=false: this drafter has no candidate selector" in capsys.readouterr().err


def test_emit_packages_the_zlab_unary_transform(tmp_path, capsys):
    """z-lab's selector scores ``softcap(m * l)`` (the adapter's default, not the identity): `emit`
    packages it (the emitted class applies the transform before TensorRT-LLM's selector). With
    ``target_architecture=`` (workers build the emitted class) it says nothing about the transform;
    without it, only the worker line does, naming it as math TensorRT-LLM's own class would change."""
    assert main(["emit", f"adapter={NAME}", "target=trtllm", f"out={tmp_path / 'pkg'}",
                 "target_architecture=Qwen3ForCausalLM"]) == 0
    out = capsys.readouterr()
    assert "unary transform" not in out.out + out.err and "Traceback" not in out.err
    assert any(p.is_file() for p in (tmp_path / "pkg").rglob("resolved.json"))
    assert main(["emit", f"adapter={NAME}", "target=trtllm", f"out={tmp_path / 'pkg2'}"]) == 0
    lines = [l for l in (lambda o: o.out + o.err)(capsys.readouterr()).splitlines() if "unary transform" in l]
    assert len(lines) == 1 and lines[0].startswith("warning: no target_architecture= given"), lines


def test_eval_with_and_without_selector(checkpoints, tmp_path, capsys):
    """`eval` on the shipped tiny target (hidden 128, vocab 256, as the tiny DFlash 2 drafter) with
    the untrained synthetic drafter: with the selector and without it, the output is the target's
    own greedy decode (check=true) and the report says which drafted; accepted lengths are reported
    both ways. A drafter without a selector refuses selector=false in one line."""
    from pathlib import Path
    from draftsmith.framework.eval.prompts import read_prompts
    pair = Path(__file__).parents[1] / "fixtures" / "tiny_pair"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in read_prompts(pair / "prompts.jsonl")[:1]))
    args = ["eval", f"checkpoint={checkpoints(NAME).converted}", f"target={pair / 'target'}", f"prompts={prompts}",
            "max_new_tokens=12", "dtype=float32", "threads=1", "format=json", "check=true"]
    got = {}
    for sel in ("true", "false"):
        assert main(args + [f"selector={sel}"]) == 0
        got[sel] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert got[sel]["matches_target"] is True and got[sel]["mean_acceptance_length"] >= 1.0
    assert got["true"]["selector"] is True and got["false"]["selector"] is False
    assert main(["eval", f"checkpoint={checkpoints('zlab_dflash').converted}", f"target={pair / 'target'}",
                 f"prompts={prompts}", "max_new_tokens=4", "selector=false"]) == 2
    assert "selector=false: this drafter has no candidate selector" in capsys.readouterr().err
