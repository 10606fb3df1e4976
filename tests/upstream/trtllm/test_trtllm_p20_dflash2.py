"""Issue 39 item 3: a DFlash 2 drafter served through TensorRT-LLM's own DFlash 2 path.

Built here, independent of the compile side: a DFlash 2 record (``ResolvedDrafter.dflash2``) and
random conv / selector tensors under TensorRT-LLM's names are added to the ``zlab_dflash`` adapter's
converted tiny checkpoint (8 query / 4 KV heads), the converted config gets what
``render_engine_keys`` renders for that record, and ``draftsmith emit`` packages it.

- The converted config: the excerpt's ``DFlashForCausalLM.__init__`` (amukkara/TensorRT-LLM
  ``modeling_dflash.py`` @ d70a2287, ``/work/shared/trtllm_src``; its omitted
  ``_validate_dflash2_config`` from the transcription ``tests/upstream/trtllm/trtllm_dflash2.py``) detects
  DFlash 2, reads the four keys and resolves the trained masks through the top-level ``is_causal``;
  with a key removed it refuses.
- The emitted drafter (``serve``: our block decode around TensorRT-LLM's ``DFlash2BlockConv``
  modules, loaded by TensorRT-LLM's ``load_weights``) and the built-in class (``worker``: the
  transcribed ``dflash_forward``), each followed by the worker's ``_apply_dflash2_selector`` /
  ``_dflash2_global_top_k`` and ``select_candidate_path``: the lm_head logits, the selector's tokens
  and its full-vocabulary path rows equal the float64 oracle (``tests/support/oracles.py`` with the
  convolutions of ``tests/support/oracles_dflash2.py``, the selector of the same file), at TP 1 and at TP 2
  (gloo; the target's ``lm_head`` vocabulary-sharded, so the candidates are the global top-k of the
  ranks' gathered ``(id, value)`` pairs).
- Planted errors: a wrong convolution or codebook in the checkpoint, and the oracle with one
  convolution or selector error, each fail the comparison.
- ``emit`` packages a non-identity unary transform and embedding scale (the emitted class's
  ``select_candidate_path`` and block decode apply them; z-lab's own record, end to end, equals the
  oracle and not TensorRT-LLM's own class, and fails with the transform skipped, its order swapped or
  the scale dropped) and warns on a sampled chain.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

from support.forkserver import start_script
import excerpts
from harness import HERE, REPO, Case, cli, expected_mask, get_wide_case, mask_matrix, one_line

sys.path.insert(0, str(REPO / "tests"))
from support import oracles_dflash2 as orc2  # noqa: E402
from support.oracles import draft_oracle  # noqa: E402

from draftsmith.framework.compile.attention import write_back  # noqa: E402
from draftsmith.framework.compile.converted_config import render_engine_keys  # noqa: E402
from draftsmith.framework.compile.resolved import ResolvedDrafter  # noqa: E402

ADAPTER = "zlab_dflash"
TAPS, GROUP, RANK, TOP_K = 3, 16, 8, 4
DFLASH2 = {"conv": {"kernel_size": TAPS, "group_size": GROUP},
           "selector": {"rank": RANK, "top_k": TOP_K, "chain": "greedy",
                        "unary": {"multiplier": 1.0, "softcap": None, "order": "scale_then_cap"}},
           "input_embedding_scale": 1.0}
ENGINE_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


def _standin():
    path = Path(__file__).resolve().parent / "trtllm_dflash2.py"
    spec = importlib.util.spec_from_file_location("trtllm_dflash2_standin", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def dflash2_config(config: dict, dflash2: dict = DFLASH2, masks=None) -> dict:
    """``config`` (a converted DFlash one) with a DFlash 2 record and what ``render_engine_keys``
    renders for it merged in, as ``converted_config.render_config`` merges them."""
    out = copy.deepcopy(config)
    rec = out["draftsmith"]
    rec["dflash2"] = copy.deepcopy(dflash2)
    if masks is not None:  # another attention table, with the flattened keys compile/attention.py writes for it
        for layer, (causal, window) in zip(rec["layers"], masks):
            layer["mask"] = {"causal": causal, "window": window}
        write_back(out, ResolvedDrafter.model_validate(rec).layers)
    resolved = ResolvedDrafter.model_validate(rec)
    for key, value in render_engine_keys(resolved, out.get("model_type")).items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def dflash2_tensors(config: dict, seed: int) -> dict:
    """Random conv / selector tensors under TensorRT-LLM's names, in the checkpoint's dtype."""
    g = torch.Generator().manual_seed(seed)
    h, v, layers = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    groups = h // GROUP
    out = {}
    for i in range(layers):
        for name in ("attention_conv", "mlp_conv"):
            base = 0.3 * torch.randn(2, TAPS, h, generator=g)
            base[:, 0] += 1.0
            out[f"layers.{i}.{name}.base_kernel"] = base
            out[f"layers.{i}.{name}.kernel_projection.weight"] = torch.randn(2 * TAPS * groups, h, generator=g) / math.sqrt(h)
    out["candidate_selector.hidden_projection.weight"] = 3 * torch.randn(RANK, h, generator=g) / math.sqrt(h)
    out["candidate_selector.predecessor_codebook"] = torch.randn(v, RANK, generator=g)
    out["candidate_selector.successor_codebook"] = torch.randn(v, RANK, generator=g)
    return {k: t.to(torch.bfloat16) for k, t in out.items()}


def write_checkpoint(folder: Path, config: dict, weights: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    save_file({k: t.contiguous() for k, t in weights.items()}, str(folder / "model.safetensors"))
    return folder


def dflash2_oracle(config: dict, w: dict, tgt: dict, hidden, anchor: int) -> dict:
    """The draft step of a DFlash 2 drafter in float64 (``tests/support/oracles.py`` ``draft_oracle``, whose
    DFlash 2 pieces come from ``tests/support/oracles_dflash2.py``): the lm_head logits of slots ``1..K``
    (``selector=False``), the selector's tokens and full-vocabulary path rows, and per position the
    candidates (where the rows are finite) with their realized scores."""
    _, logits, _ = draft_oracle(config, w, tgt, hidden, anchor, selector=False)
    tokens, path, _ = draft_oracle(config, w, tgt, hidden, anchor)
    ids, _ = orc2.top_candidates(logits, TOP_K)
    return {"logits": logits, "tokens": tokens, "path": path, "candidates": ids, "realized": path.gather(-1, ids)}


# ----------------------------------------------------------------------------- the case


class D2:
    """The DFlash 2 checkpoint, its package, oracle and driver runs (made once per module)."""

    def __init__(self, tmp_path_factory, dflash2: dict = DFLASH2):
        base = get_wide_case(ADAPTER, tmp_path_factory)
        self.root = tmp_path_factory.mktemp("trtllm-dflash2")
        self.config = dflash2_config(base.config, dflash2)
        self.weights = {**base.weights, **dflash2_tensors(self.config, seed=391)}
        self.converted = write_checkpoint(self.root / "converted", self.config, self.weights)
        r = cli("emit", f"adapter={ADAPTER}", "target=trtllm", f"out={self.root / 'emitted'}",
                f"config={self.converted}")
        assert r.returncode == 0, f"emit of the DFlash 2 checkpoint failed: {(r.stderr or r.stdout)[-800:]}"
        pkg = next(p for p in (self.root / "emitted").glob("*") if (p / "__init__.py").is_file())
        self.emit_output = r.stdout
        self.case = Case(ADAPTER, self.root)
        self.case.__dict__.update(source=base.source, converted=self.converted, emitted=(r, pkg))
        data = torch.load(self.case.inputs)
        self.hidden, self.anchor = data["hidden"], data["anchor"]
        self.target = load_file(str(self.case.target / "model.safetensors"))
        self.oracle = dflash2_oracle(self.config, self.weights, self.target, self.hidden, self.anchor)

    def planted(self, name: str, weights: dict) -> Path:
        return write_checkpoint(self.root / name, self.config, weights)


@pytest.fixture(scope="module")
def d2(tmp_path_factory):
    """Needs no TensorRT-LLM excerpt (the drive runs use the stand-in); the excerpt tests skip without it."""
    return D2(tmp_path_factory)


#: z-lab's unary transform and a block-embedding scale: what the emitted package applies itself
DFLASH2_OWN = {**DFLASH2, "input_embedding_scale": 1.5,
               "selector": {**DFLASH2["selector"],
                            "unary": {"multiplier": 0.19611613513818404, "softcap": 20.0, "order": "scale_then_cap"}}}


@pytest.fixture(scope="module")
def d2_own(tmp_path_factory):
    """The DFlash 2 checkpoint with :data:`DFLASH2_OWN` (TP 2 test)."""
    return D2(tmp_path_factory, DFLASH2_OWN)


def _stage_ok(out: dict, where: str) -> None:
    for k in ("build", "load", "decode"):
        assert k not in out, f"{where}: {k}: {out[k]['error']}\n{out[k].get('trace', '')}"


def close(got, want, rel=2e-3) -> float:
    """Max abs difference, checked against ``rel`` of the oracle's scale."""
    got, want = torch.as_tensor(got, dtype=torch.float64), want.double()
    finite = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), finite), "the -inf pattern differs"
    err = float((got[finite] - want[finite]).abs().max())
    assert err <= rel * max(1.0, float(want[finite].abs().max())), f"differs by {err:.3g}"
    return err


def assert_matches(out: dict, oracle: dict, where: str, vocab_slice=None) -> None:
    """lm_head logits (the rank's shard with ``vocab_slice``), tokens and path rows vs the oracle."""
    _stage_ok(out, where)
    assert out.get("has_block_conv") is True, f"{where}: the drafter ran without TensorRT-LLM's block convolutions"
    want_logits = oracle["logits"] if vocab_slice is None else oracle["logits"][:, vocab_slice]
    try:
        close(out["draft_logits"], want_logits)
        close(out["logits"], oracle["path"])
    except AssertionError as e:
        raise AssertionError(f"{where}: {e}") from None
    assert out["tokens"] == oracle["tokens"].tolist(), f"{where}: tokens {out['tokens']} != {oracle['tokens'].tolist()}"


# ----------------------------------------------------------------------------- the converted config


def _excerpt_class():
    """The excerpt's DFlashForCausalLM with the one omitted method its ``__init__`` calls for DFlash 2
    (``_validate_dflash2_config``, transcribed from the same commit in tests/upstream/trtllm/trtllm_dflash2.py)."""
    ld = excerpts.loader()
    df = ld.dflash(ld.config_utils())
    base = df["DFlashForCausalLM"]
    assert "_validate_dflash2_config" not in vars(base) and "_validate_dflash2_config" in \
        ld.omitted_names("modeling_dflash_excerpt.py", "DFlashForCausalLM")
    return ld, type("DFlashForCausalLM", (base,),
                    {"_validate_dflash2_config": _standin().DFlashForCausalLM._validate_dflash2_config})


def _build(ld, cls, config):
    mc = ld.ModelConfig(pretrained_config=SimpleNamespace(**copy.deepcopy(config)), spec_config=None)
    return cls(mc, dflash_attention_backend="VANILLA")


MASK_CASES = {"as_converted": None, "causal_windows": [(True, 8), (True, None)],
              "non_causal_windows": [(False, 8), (False, None)], "mixed": [(True, 8), (False, None)]}


@pytest.mark.parametrize("masks", list(MASK_CASES), ids=list(MASK_CASES))
def test_excerpt_init_reads_the_rendered_dflash2_keys_and_masks(d2, masks):
    ld, cls = _excerpt_class()
    cfg = dflash2_config(_base_config(d2), masks=MASK_CASES[masks])
    dm = _build(ld, cls, cfg)
    assert dm._is_dflash2, "TensorRT-LLM's __init__ did not detect DFlash 2 from the converted config"
    got = (dm._dflash2_conv_taps, dm._dflash2_conv_group_size, dm._dflash2_selector_rank, dm._dflash2_selector_top_k)
    assert got == (TAPS, GROUP, RANK, TOP_K)
    rec = ResolvedDrafter.model_validate(cfg["draftsmith"])
    block = cfg["dflash_config"]["block_size"]
    if masks == "mixed":  # one is_causal cannot say it: rendered null, so TensorRT-LLM's layer-type rule decides
        assert cfg["is_causal"] is None
    for i, m in enumerate(rec.masks):
        causal, (left, right) = dm._resolve_block_attention(i)
        assert torch.equal(mask_matrix(causal, left, right, 12, block),
                           expected_mask({"causal": m.causal, "window": m.window}, 12, block)), \
            f"layer {i}: TensorRT-LLM resolves causal={causal} ({left}, {right}); trained {m}"


def _base_config(d2):
    cfg = copy.deepcopy(d2.config)
    cfg["draftsmith"].pop("dflash2")
    for key in ENGINE_KEYS:
        cfg["dflash_config"].pop(key)
    cfg.pop("is_causal", None)
    return cfg


@pytest.mark.parametrize("key", ENGINE_KEYS)
def test_excerpt_init_refuses_the_config_without_a_key(d2, key):
    ld, cls = _excerpt_class()
    cfg = copy.deepcopy(d2.config)
    del cfg["dflash_config"][key]
    if key == "selector_rank":  # still detected through conv_kernel_size
        assert cfg["dflash_config"]["conv_kernel_size"] > 0
    with pytest.raises(ValueError, match=f"missing required dflash_config entries.*{key}"):
        _build(ld, cls, cfg)


def test_a_plain_dflash_record_renders_no_dflash2_key(d2):
    cfg = _base_config(d2)
    keys = render_engine_keys(ResolvedDrafter.model_validate(cfg["draftsmith"]), cfg["model_type"])
    assert "is_causal" not in keys and "dflash_config" not in keys
    ld, cls = _excerpt_class()
    assert not _build(ld, cls, cfg)._is_dflash2


# ----------------------------------------------------------------------------- the draft step, TP 1


def test_oracle_selector_is_not_the_plain_argmax(d2):
    """The pairwise term changes at least one drafted token (else the selector checks would be vacuous)."""
    o = d2.oracle
    assert o["tokens"].tolist() != o["logits"].argmax(-1).tolist()


BACKENDS = ("VANILLA", "TRTLLM")


def builtin_run(d2, backend: str) -> dict:
    """A worker process that never imported the package builds TensorRT-LLM's built-in class from the
    converted config (one backend a process: the package is imported during that first build, and a
    later build in the same process would find its builder)."""
    arch = d2.case.serve().get("exported_arch_modules") or {}
    out = d2.case.drive("worker", arch_modules=arch, backends=[backend])["backends"][backend]
    assert out.get("drafter_class") == "DFlashForCausalLM", out.get("drafter_class") or out.get("build")
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["serve", "worker"])
def test_tp1_draft_matches_the_oracle(d2, mode, backend):
    """serve: the emitted drafter (our block decode, TensorRT-LLM's conv modules); worker: the built-in
    class alone (TensorRT-LLM's own DFlash 2 path, transcribed), from the converted config."""
    if mode == "serve":
        out = d2.case.serve()["backends"][backend]
        assert out.get("drafter_class") == "DraftsmithDrafter", out.get("drafter_class") or out.get("build")
    else:
        out = builtin_run(d2, backend)
    assert_matches(out, d2.oracle, f"{mode} {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_serve_equals_tensorrt_llms_own_path(d2, backend):
    a, b = d2.case.serve()["backends"][backend], builtin_run(d2, backend)
    assert a["tokens"] == b["tokens"], backend
    close(a["logits"], torch.tensor(b["logits"], dtype=torch.float64), rel=1e-5)


# ----------------------------------------------------------------------------- TP 2 (gloo)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("record", ["identity", "own"])
def test_tp2_every_rank_drafts_the_oracle_path(request, record):
    """Each rank of the served drafter at TP 2, with the identity record and with :data:`DFLASH2_OWN`."""
    d2 = request.getfixturevalue("d2" if record == "identity" else "d2_own")
    tp = 2
    res = str(d2.root / "tp2.json")
    run = {"mode": "serve", "package_dir": str(d2.case.package()), "checkpoint": str(d2.converted),
           "target": str(d2.case.target), "inputs": str(d2.case.inputs), "arch_modules": None,
           "backends": ["VANILLA"], "result": res, "attention_dp": False, "shard_lm_head": True}
    job = d2.root / "tp2.job.json"
    job.write_text(json.dumps({"world_size": tp, "tp_size": tp, "port": _free_port(), "runs": [run]}))
    procs = [start_script(HERE / "tp_drive.py", job, r) for r in range(tp)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    vocab = d2.config["vocab_size"]
    tp1 = d2.case.serve()["backends"]["VANILLA"]
    for r in range(tp):
        f = Path(res + f".rank{r}")
        assert f.is_file(), f"tp 2 rank {r} died: {errs[r][-1500:]}"
        out = json.loads(f.read_text())
        assert "fatal" not in out, out["fatal"]["error"] + out["fatal"]["trace"]
        out = out["backends"]["VANILLA"]
        shard = slice(r * vocab // tp, (r + 1) * vocab // tp)
        assert len(out["draft_logits"][0]) == vocab // tp, f"rank {r}: the lm_head logits are not vocab-sharded"
        assert_matches(out, d2.oracle, f"tp 2 rank {r}", vocab_slice=shard)
        assert out["tokens"] == tp1["tokens"], f"tp 2 rank {r}: tokens differ from TP 1"


# ----------------------------------------------------------------------------- planted errors


def _swap_conv_sides(w):
    w = dict(w)
    k = "layers.0.attention_conv.base_kernel"
    w[k] = w[k].flip(0).contiguous()
    return w


def _perturb_successor_rows(w, ids):
    w = dict(w)
    k = "candidate_selector.successor_codebook"
    t = w[k].float().clone()
    t[ids] = -t[ids]
    w[k] = t.to(w[k].dtype)
    return w


def test_a_planted_conv_error_in_the_checkpoint_fails(d2):
    path = d2.planted("planted_conv", _swap_conv_sides(d2.weights))
    out = d2.case.drive("serve", checkpoint=path, backends=["VANILLA"])["backends"]["VANILLA"]
    with pytest.raises(AssertionError):
        assert_matches(out, d2.oracle, "planted conv")


def test_a_planted_selector_error_in_the_checkpoint_fails_while_the_logits_agree(d2):
    ids = d2.oracle["candidates"].flatten().unique()
    path = d2.planted("planted_selector", _perturb_successor_rows(d2.weights, ids))
    out = d2.case.drive("serve", checkpoint=path, backends=["VANILLA"])["backends"]["VANILLA"]
    close(out["draft_logits"], d2.oracle["logits"])  # the block decode is untouched
    with pytest.raises(AssertionError):
        close(out["logits"], d2.oracle["path"])


def _coefficient_of_the_input_row(sublayer, x, projection, base_kernel, block, group_size):
    """Planted: each tap uses the coefficients of the row it reads (``d_{t-i}``), not of the row written."""
    taps, h = base_kernel.shape[1], base_kernel.shape[2]
    d = orc2.split_coefficients(orc2.conv_coefficients(x, projection), taps, h // group_size)
    grp = torch.arange(h) // group_size

    def side(y, delta, base):
        out = torch.zeros_like(y)
        for row in range(y.shape[0]):
            for tap in range(min(taps, row % block + 1)):
                out[row] += (base[tap] + delta[row - tap, tap, grp]) * y[row - tap]
        return out

    return side(sublayer(side(x.double(), d[:, 0], base_kernel[0].double())), d[:, 1], base_kernel[1].double())


def _no_output_side(sublayer, x, projection, base_kernel, block, group_size):
    taps, h = base_kernel.shape[1], base_kernel.shape[2]
    d = orc2.split_coefficients(orc2.conv_coefficients(x, projection), taps, h // group_size)
    return sublayer(orc2.grouped_block_conv(x, d[:, 0], base_kernel[0], block, group_size))


_edge_scores = orc2.edge_scores


def _no_gate(A, C, W, hidden, ids, unary, anchors):
    return _edge_scores(A, C, torch.ones_like(W) / W.shape[1], hidden, ids, unary, anchors)


def _predecessor_is_the_anchor(A, C, W, hidden, ids, unary, anchors):
    """Planted: every step scored as if its predecessor were the anchor."""
    return torch.stack([_edge_scores(A, C, W, hidden[:, j:j + 1], ids[:, j:j + 1], unary[:, j:j + 1], anchors)[:, 0]
                        for j in range(ids.shape[1])], 1)


PLANTED = {"coefficient_of_the_input_row": ("conv_wrap", _coefficient_of_the_input_row),
           "no_output_side_conv": ("conv_wrap", _no_output_side),
           "ungated_pairwise_term": ("edge_scores", _no_gate),
           "predecessor_is_the_anchor": ("edge_scores", _predecessor_is_the_anchor)}


@pytest.mark.parametrize("name", list(PLANTED))
def test_the_drafted_path_fails_against_a_planted_oracle_error(d2, monkeypatch, name):
    out = d2.case.serve()["backends"]["VANILLA"]
    assert_matches(out, d2.oracle, "unplanted")
    monkeypatch.setattr(orc2, *PLANTED[name])
    planted = dflash2_oracle(d2.config, d2.weights, d2.target, d2.hidden, d2.anchor)
    with pytest.raises(AssertionError):
        assert_matches(out, planted, name)


# ----------------------------------------------------------------------------- what TensorRT-LLM does not read


def _emit(d2, name, dflash2, masks=None):
    cfg = dflash2_config(_base_config(d2), dflash2=dflash2, masks=masks)
    folder = write_checkpoint(d2.root / name, cfg, d2.weights)
    return cli("emit", f"adapter={ADAPTER}", "target=trtllm", f"out={d2.root / (name + '_out')}", f"config={folder}")


@pytest.mark.parametrize("change", [
    {"selector": {"unary": {"multiplier": 0.19611613513818404, "softcap": 20.0}}},
    {"selector": {"unary": {"softcap": 30.0, "order": "cap_then_scale"}}},
    {"input_embedding_scale": 2.0},
], ids=["zlab_unary", "cap_then_scale", "embedding_scale"])
def test_emit_packages_what_tensorrt_llms_dflash2_path_does_not_read(d2, change):
    """The unary transform and the embedding scale are the emitted package's (see the end-to-end test):
    emit packages them, and its one warning is the worker line saying TensorRT-LLM's own class (built in
    worker processes unless ``target_architecture=`` is given) would draft with different math."""
    rec = copy.deepcopy(DFLASH2)
    for k, v in change.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                rec[k][k2] = {**rec[k][k2], **v2} if isinstance(v2, dict) else v2
        else:
            rec[k] = v
    r = _emit(d2, "packaged_" + "_".join(sorted(change)) + str(len(json.dumps(change))), rec)
    assert r.returncode == 0, r.stderr
    warnings = [l for l in (r.stdout + r.stderr).splitlines() if "warning" in l.lower()]
    assert len(warnings) == 1, r.stdout + r.stderr
    assert "no target_architecture= given" in warnings[0] and "different math" in warnings[0], warnings[0]


def test_emit_warns_on_a_sampled_chain(d2):
    rec = copy.deepcopy(DFLASH2)
    rec["selector"]["chain"] = "sampled"
    r = _emit(d2, "sampled", rec)
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if "chain is 'sampled'" in l]
    assert len(lines) == 1 and lines[0].startswith("warning:"), r.stdout
    assert "chain is 'sampled'" not in d2.emit_output


def _without_keys(cfg):
    for key in ENGINE_KEYS:
        del cfg["dflash_config"][key]


EDITED = {"keys_removed": (_without_keys, "dflash_config.conv_kernel_size None"),
          "top_k_edited": (lambda c: c["dflash_config"].update(selector_top_k=TOP_K + 1),
                           f"dflash_config.selector_top_k {TOP_K + 1}"),
          "is_causal_flipped": (lambda c: c.update(is_causal=True), "is_causal True")}


@pytest.mark.parametrize("edit", list(EDITED))
def test_the_builder_refuses_a_converted_config_edited_against_its_record(d2, edit):
    """What TensorRT-LLM's DFlash 2 path reads must be what the record renders (else it would build
    another drafter than the one the package runs): one line naming the key."""
    from draftsmith.framework.emit.binding import PackagedDrafter

    drafter = PackagedDrafter.from_package(d2.case.package())
    drafter.bind(SimpleNamespace(**copy.deepcopy(d2.config)))  # as converted: accepted
    cfg = copy.deepcopy(d2.config)
    change, needle = EDITED[edit]
    change(cfg)
    with pytest.raises(ValueError) as e:  # what the builder and the backbone call first
        drafter.bind(SimpleNamespace(**cfg))
    assert needle in str(e.value) and one_line(str(e.value)), str(e.value)


def test_the_builder_refuses_when_tensorrt_llm_does_not_detect_dflash2(d2):
    """A TensorRT-LLM whose DFlashForCausalLM has no DFlash 2 path (no ``is_dflash2``) would run the
    drafter as DFlash 1: the package's builder refuses it in one line."""
    from draftsmith.framework.emit.binding import PackagedDrafter
    from draftsmith.framework.emit.runtime import make_builder

    drafter = PackagedDrafter.from_package(d2.case.package())

    class WithoutDFlash2:  # what an older base builds: no is_dflash2
        def __init__(self, draft_config, dflash_attention_backend):
            pass

    builder = make_builder(drafter, type("DraftsmithDrafter", (WithoutDFlash2,), {}), None)
    cfg = SimpleNamespace(**copy.deepcopy(d2.config))
    mc = SimpleNamespace(spec_config=SimpleNamespace(attention_backend="VANILLA"))
    with pytest.raises(ValueError, match="did not detect DFlash 2") as e:
        builder(mc, SimpleNamespace(pretrained_config=cfg), None, None)
    assert one_line(str(e.value))


def test_the_block_decode_refuses_a_drafter_without_its_convolutions(d2):
    from draftsmith.framework.emit.binding import PackagedDrafter

    bound = PackagedDrafter.from_package(d2.case.package()).bind(SimpleNamespace(**copy.deepcopy(d2.config)))
    decode = bound.block_decode("cpu", 64)
    model = SimpleNamespace(model=SimpleNamespace(layers=[]), has_block_conv=False)
    with pytest.raises(ValueError, match="no block convolutions") as e:
        decode(model, torch.zeros(1, 16, 128), None, None, None, None, None)
    assert one_line(str(e.value))


# ----------------------------------------------------------------------------- a DFlash 2 adapter, end to end

#: the DFlash 2 adapter (branch h39a), synthesized with the identity unary transform (``identity``) and
#: with its own z-lab transform (output_multiplier 0.196, soft cap 20, scale_then_cap) and an
#: input_embedding_scale of 1.5 (``own``), which the emitted package applies and TensorRT-LLM's own class does not
D2_ADAPTER = "zlab_dflash2"
D2_TINY = "adapter.synth.tiny={num_attention_heads: 8, num_key_value_heads: 4}"
D2_SYNTH = ("adapter.synth.config.dflash_config.output_multiplier=1.0",
            "adapter.synth.config.dflash_config.final_logit_softcapping=0.0", D2_TINY)
D2_OWN = ("+adapter.synth.config.dflash_config.input_embedding_scale=1.5", D2_TINY)
#: case id -> (adapter, its synth overrides: 8 query / 4 KV heads); speculators' DFlash 2 scores raw
#: logits (adapters/speculators_dflash2.yaml): TensorRT-LLM's unary transform as saved
D2_ADAPTERS = {f"{D2_ADAPTER}-identity": (D2_ADAPTER, D2_SYNTH), f"{D2_ADAPTER}-own": (D2_ADAPTER, D2_OWN),
               "speculators_dflash2": ("speculators_dflash2",
                                       ("adapter.synth.tiny={transformer_layer_config.num_attention_heads: 8, "
                                        "transformer_layer_config.num_key_value_heads: 4}",)),
               # the layout SGLang's MiniMaxDFlash2DraftModel alias implies, TensorRT-LLM's transform (identity)
               "minimax_dflash2": ("minimax_dflash2",
                                   ("adapter.synth.config.dflash_config.output_multiplier=1.0",
                                    "adapter.synth.config.dflash_config.final_logit_softcapping=0.0",
                                    "adapter.synth.tiny.num_attention_heads=8", "adapter.synth.tiny.num_key_value_heads=4"))}
_D2_CASES: dict = {}


def _d2_case(tmp_path_factory, name: str) -> Case:
    adapter, synth = D2_ADAPTERS[name]
    if not (REPO / "adapters" / f"{adapter}.yaml").is_file():
        pytest.skip(f"adapters/{adapter}.yaml is not on this branch")
    key = ("p20", name)
    return _D2_CASES.get(key) or _D2_CASES.setdefault(
        key, Case(adapter, tmp_path_factory.mktemp(f"trtllm-{name}"), synth_args=synth))


def _d2_oracle_path(case: Case, **record) -> torch.Tensor:
    """``draft_oracle``'s (tokens, path rows) of ``case`` with its DFlash 2 record edited by ``record``."""
    config = copy.deepcopy(case.config)
    d2 = config["draftsmith"]["dflash2"]
    for k, v in record.items():
        if k == "unary":
            d2["selector"]["unary"].update(v)
        else:
            d2[k] = v
    data = torch.load(case.inputs)
    tgt = load_file(str(case.target / "model.safetensors"))
    return draft_oracle(config, case.weights, tgt, data["hidden"], data["anchor"])[:2]


@pytest.mark.parametrize("name", sorted(D2_ADAPTERS))
@pytest.mark.parametrize("mode", ["serve", "worker"])
def test_the_dflash2_adapter_is_served_end_to_end(tmp_path_factory, mode, name):
    """synth -> convert -> emit -> TensorRT-LLM (VANILLA; the adapter's non-causal window is refused by
    TensorRT-LLM itself under TRTLLM) against ``draft_oracle``'s DFlash 2 path rows. ``worker`` (TensorRT-LLM's
    own class, which scores the raw logits of unscaled embeddings) matches only an identity record; with
    z-lab's own transform it must differ (the package's transform and scale change the rows)."""
    case = _d2_case(tmp_path_factory, name)
    d2 = case.config["draftsmith"]["dflash2"]
    assert d2 is not None
    own = name.endswith("-own")
    if own:
        u = d2["selector"]["unary"]
        assert (u["multiplier"], u["softcap"], u["order"], d2["input_embedding_scale"]) == \
            (0.19611613513818404, 20.0, "scale_then_cap", 1.5), d2
    if mode == "serve":
        out = case.drive("serve", backends=["VANILLA"])["backends"]["VANILLA"]
        assert out.get("drafter_class") == "DraftsmithDrafter", out.get("drafter_class") or out.get("build")
    else:
        arch = case.drive("serve", backends=["VANILLA"]).get("exported_arch_modules") or {}
        out = case.drive("worker", arch_modules=arch, backends=["VANILLA"])["backends"]["VANILLA"]
        assert out.get("drafter_class") == "DFlashForCausalLM", out.get("drafter_class") or out.get("build")
    _stage_ok(out, f"{name} {mode}")
    assert out.get("has_block_conv") is True
    tokens, path = case.oracle
    if own and mode == "worker":
        with pytest.raises(AssertionError):
            close(out["logits"], path)
        return
    close(out["logits"], path)
    assert out["tokens"] == tokens.tolist(), f"{name} {mode}: tokens {out['tokens']} != {tokens.tolist()}"


PLANTED_RECORD = {"transform_skipped": {"unary": {"multiplier": 1.0, "softcap": None}},
                  "order_swapped": {"unary": {"order": "cap_then_scale"}},
                  "embedding_unscaled": {"input_embedding_scale": 1.0}}


@pytest.mark.parametrize("planted", list(PLANTED_RECORD))
def test_the_served_zlab_path_fails_against_a_planted_record_error(tmp_path_factory, planted):
    """The served rows of z-lab's own record differ from the oracle's with the transform skipped, its order
    swapped or the embedding scale dropped."""
    case = _d2_case(tmp_path_factory, f"{D2_ADAPTER}-own")
    out = case.drive("serve", backends=["VANILLA"])["backends"]["VANILLA"]
    close(out["logits"], case.oracle[1])
    _, path = _d2_oracle_path(case, **PLANTED_RECORD[planted])
    with pytest.raises(AssertionError):
        close(out["logits"], path)


def test_emit_warns_about_worker_masks_only_when_is_causal_cannot_say_them(d2):
    """One causality: the rendered is_causal makes the built-in class resolve every layer (no warning);
    mixed: is_causal is null and the layer-type rule applies, with DFlash's warnings (R2)."""
    assert "resolve these masks wrongly" not in d2.emit_output
    r = _emit(d2, "mixed", DFLASH2, masks=MASK_CASES["mixed"])
    assert r.returncode == 0, r.stderr
    assert [l for l in r.stdout.splitlines() if "resolve these masks wrongly" in l and "causal windows" in l], r.stdout
    r = _emit(d2, "causal", DFLASH2, masks=[(True, None), (True, None)])
    assert r.returncode == 0 and "resolve these masks wrongly" not in r.stdout, r.stdout
