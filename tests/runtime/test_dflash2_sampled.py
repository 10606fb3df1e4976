"""DFlash 2's sampled walk on the reference host (docs/dflash2-reference.md section 5, the chain):
``draft temperature=T`` for a drafter whose recorded ``selector_chain`` is ``sampled`` walks the
selector's path by the Gumbel-max sample of ``softmax(row / T)`` at each step, conditioned on the
sampled slot. Checked against the float64 oracle fed the same noise (tokens and path logits),
the noise itself against the softmax frequencies it must produce, and the refusals (no selector,
``selector=false``, a greedy chain) as one line, exit 2."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.runtime import dflash2 as host2
from draftsmith.framework.runtime.dflash import DFlashDraftModel
from support.helpers import fake_target, one_error, read_checkpoint
from support.oracles import draft_oracle

NAME = "zlab_dflash2"
CONTEXT = 11
ANCHORS = (9, 130)


@pytest.fixture(scope="module")
def case(checkpoints):
    ck = checkpoints(NAME)
    cfg, w = read_checkpoint(ck.converted)
    tgt = load_file(ck.target / "model.safetensors")
    r = ResolvedDrafter.from_config(cfg)
    assert r.dflash2.selector.chain == "sampled"  # the z-lab record: the walk these tests need
    g = torch.Generator().manual_seed(8)
    hidden = [torch.randn(CONTEXT, r.dims.num_target_layers * r.dims.target_hidden, generator=g) for _ in ANCHORS]
    model = DFlashDraftModel(r, dtype=torch.float32)
    model.load_weights(w)
    model.load_weights_from_target_model(fake_target(tgt["model.embed_tokens.weight"], tgt["lm_head.weight"]))
    cache = model.make_cache(len(ANCHORS), max_context=CONTEXT)
    for n, h in enumerate(hidden):
        model.append_context(cache, h, seq=n)
    return dict(ck=ck, cfg=cfg, w=w, tgt=tgt, r=r, hidden=hidden, model=model, cache=cache)


def _sampled(c, temperature: float, seed: int):
    chain = host2.Chain(*c["r"].walk_chain(True, temperature))
    return c["model"].draft(torch.tensor(ANCHORS), c["cache"], chain=chain,
                            generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("temperature", [0.3, 1.0, 4.0])
def test_sampled_walk_equals_oracle_given_its_noise(case, temperature):
    for seed in range(3):
        out = _sampled(case, temperature, seed)
        assert out.selector.noise is not None and out.selector.noise.shape == out.selector.candidates.shape
        for n, (h, a) in enumerate(zip(case["hidden"], ANCHORS)):
            toks, rows, _ = draft_oracle(case["cfg"], case["w"], case["tgt"], h.double(), a,
                                         temperature=temperature, noise=out.selector.noise[n].double())
            assert out.tokens[n].tolist() == toks.tolist(), (temperature, seed, n)
            seen = torch.isfinite(rows)
            assert torch.equal(torch.isfinite(out.logits[n]), seen)
            torch.testing.assert_close(out.logits[n].double()[seen], rows[seen], rtol=1e-5, atol=1e-5)


def test_sampling_moves_the_path_and_temperature_zero_is_greedy(case):
    """At a high temperature some seed's path leaves the greedy one (the noise is used, and each
    step conditions on the sampled slot: the oracle above agrees); temperature 0 is the greedy walk."""
    greedy = case["model"].draft(torch.tensor(ANCHORS), case["cache"]).tokens
    assert case["r"].walk_chain(True, 0.0) == ("greedy", None)
    assert any(not torch.equal(_sampled(case, 4.0, s).tokens, greedy) for s in range(4))
    # the same seed draws the same path
    assert torch.equal(_sampled(case, 1.0, 11).tokens, _sampled(case, 1.0, 11).tokens)


def test_gumbel_max_samples_the_softmax():
    """One step's choice frequencies over many requests against ``softmax(row / T)`` computed here
    (a binomial bound of 5 standard deviations per candidate)."""
    k, n, temperature = 5, 40000, 0.7
    row = torch.tensor([1.0, 0.4, 0.0, -0.5, 0.9])
    scores = row.expand(n, 1, k, k).clone()
    ids = torch.arange(k).expand(n, 1, k)
    noise = host2.gumbel_noise((n, 1, k), torch.Generator().manual_seed(3))
    _, chosen, _ = host2.walk(scores, ids, host2.Chain("sampled", temperature), noise)
    freq = torch.bincount(chosen[:, 0], minlength=k).double() / n
    p = torch.exp(row.double() / temperature)
    p = p / p.sum()
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / n).sqrt()).all(), (freq, p)


def test_cli_dump_reproduces_with_the_oracle(case, tmp_path, capsys):
    """``draftsmith draft temperature=`` end to end: the dump's noise, fed to the oracle with the
    dumped context, gives the dumped path (every timed repeat drafts the same path)."""
    ck = case["ck"]
    dump = tmp_path / "d.safetensors"
    assert main(["draft", f"checkpoint={ck.converted}", f"target={ck.target}", "context=9", "seed=2",
                 "temperature=0.8", f"dump={dump}", "dtype=float32"]) == 0
    assert "sampled walk, temperature 0.8" in capsys.readouterr().out
    with safe_open(str(dump), "pt") as f:
        d = {k: f.get_tensor(k) for k in f.keys()}
        assert f.metadata()["temperature"] == "0.8"
    toks, rows, _ = draft_oracle(case["cfg"], case["w"], case["tgt"], d["inputs.target_hidden"].double(),
                                 int(d["inputs.anchor"][0]), temperature=0.8, noise=d["outputs.noise"].double())
    assert d["outputs.tokens"].tolist() == toks.tolist()


@pytest.mark.parametrize("args,named", [
    (["adapter=minimax_dspark", "temperature=0.5"], "no candidate selector"),
    (["adapter=zlab_dflash2", "temperature=0.5", "selector=false"], "selector=false drafts the plain argmax"),
    (["adapter=zlab_dflash2", "temperature=0.5",
      "adapter.config.fields.dflash_config.selector_chain.default=greedy"], "selector_chain is greedy"),
    (["adapter=zlab_dflash2", "temperature=-1"], "expected a number >= 0"),
    (["adapter=zlab_dflash2", "temperature=nan"], "expected a finite number"),
])
def test_refusals_are_one_line(args, named, capsys):
    assert main(["draft", *args]) == 2
    line = one_error(capsys)
    assert named in line and ("temperature=" in line), line


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sampled_walk_equals_oracle_given_its_noise(case, tmp_path):
    """``run_draft`` on CUDA at a temperature (Gumbel noise from a CUDA generator): the oracle fed
    the dumped noise and context gives the dumped path."""
    from draftsmith.framework.runtime.draft import run_draft

    ck = case["ck"]
    dump = tmp_path / "cuda.safetensors"
    r = run_draft(ck.converted, ck.target, device="cuda", context=9, seed=4, dump=dump, dtype="float32",
                  temperature=1.5)
    assert r.temperature == 1.5
    with safe_open(str(dump), "pt") as f:
        d = {k: f.get_tensor(k) for k in f.keys()}
    toks, rows, _ = draft_oracle(case["cfg"], case["w"], case["tgt"], d["inputs.target_hidden"].double(),
                                 int(d["inputs.anchor"][0]), temperature=1.5, noise=d["outputs.noise"].double())
    assert d["outputs.tokens"].tolist() == toks.tolist()
    seen = torch.isfinite(rows)
    torch.testing.assert_close(d["outputs.logits"].double()[seen], rows[seen], rtol=1e-3, atol=1e-3)
