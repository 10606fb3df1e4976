"""``draftsmith eval`` on the shipped tiny pair (tests/fixtures/tiny_pair), on CPU.

Oracles: the target's own greedy generation is ``transformers``' ``generate(do_sample=False)``
(its code, not ours); the drafter math the pair was trained with is the training script's
own module (bench/train_tiny_pair.py, written apart from the reference host).

Thresholds come from bench/mask_effect.py's run on this pair (docs/benchmarks.md): on the
first 4 prompts with 32 new tokens (float32) the pair served as trained accepts 5.23 tokens
per step, served with a causal window 3.94; the threshold sits between, 0.6 from each. The
trained DFlash 2 drafter of the same target (tests/fixtures/tiny_pair/dflash2, bench/train_tiny_dflash2.py;
docs/benchmarks.md) accepts 5.95 there through its candidate selector and 5.24 by the plain argmax
of the same drafter; its threshold sits between, 0.35 from each.
"""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import transformers

from draftsmith.framework.cli.main import main
from draftsmith.framework.eval.prompts import read_prompts
from support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
PAIR = ROOT / "tests" / "fixtures" / "tiny_pair"
MAX_NEW = 32
N_PROMPTS = 4
THRESHOLD = 4.6  # as trained 5.23, causal window 3.94 (first 4 prompts, 32 tokens, float32)
DFLASH2_THRESHOLD = 5.6  # selector 5.95, plain argmax 5.24 (first 4 prompts, 32 tokens, float32)


@pytest.fixture
def one_thread():
    """Tiny matmuls on a shared CPU run ~10x faster on one thread; restored afterwards."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture
def prompts_file(tmp_path):
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in read_prompts(PAIR / "prompts.jsonl")[:N_PROMPTS]))
    return p


def run_eval(*args) -> tuple[int, str, str]:
    rc, out, err, _ = run_cli(["eval", *args])
    return rc, out, err


def eval_json(capsys, *args) -> dict:
    rc, out, err = run_eval("format=json", "threads=1", "dtype=float32", f"max_new_tokens={MAX_NEW}", *args)
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])


def hf_greedy(prompts: list[str]) -> list[list[int]]:
    """The target alone through transformers' ``generate`` (greedy), float32."""
    tok = transformers.AutoTokenizer.from_pretrained(str(PAIR / "target"))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(PAIR / "target"), dtype=torch.float32).eval()
    out = []
    for text in prompts:
        ids = torch.tensor([tok(text)["input_ids"]])
        gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=MAX_NEW, do_sample=False,
                             pad_token_id=0)
        out.append(gen[0, ids.shape[1]:].tolist())
    return out


def test_shipped_pair_converts_accepts_and_matches_target_greedy(capsys, prompts_file, one_thread):
    # the source checkpoint (MiniMax layout, MXFP8) is converted by the shipped adapter on the way
    r = eval_json(capsys, "adapter=minimax_dspark", f"checkpoint={PAIR / 'dspark'}", f"target={PAIR / 'target'}",
                  f"prompts={prompts_file}", "check=true")
    assert r["max_draft_len"] == 7 and r["prompts"] == N_PROMPTS
    assert [l["window"] for l in r["layers"]] == [32] * 3 and not any(l["causal"] for l in r["layers"])
    assert r["mean_acceptance_length"] > THRESHOLD, r["mean_acceptance_length"]
    assert r["mean_acceptance_length"] == pytest.approx(1 + sum(r["acceptance_by_position"]), abs=1e-3)
    pos = r["acceptance_by_position"]
    assert all(a >= b for a, b in zip(pos, pos[1:]))  # accepting draft k+1 needs draft k
    want = hf_greedy(read_prompts(prompts_file))
    assert [p["tokens"] for p in r["per_prompt"]] == want
    assert all(len(t) == MAX_NEW for t in want)
    assert r["matches_target"] is True and r["tokens_per_second"] > 0


@pytest.mark.parametrize("selector", [True, False])
def test_trained_dflash2_pair_accepts_more_through_its_selector(capsys, prompts_file, one_thread, selector):
    """The z-lab-layout DFlash 2 source checkpoint, converted by the shipped adapter on the way: through
    its candidate selector it accepts more than by the plain argmax of the same drafter, and both
    outputs are the target's own greedy decode (transformers' ``generate``)."""
    r = eval_json(capsys, "adapter=zlab_dflash2", f"checkpoint={PAIR / 'dflash2'}", f"target={PAIR / 'target'}",
                  f"prompts={prompts_file}", "check=true", f"selector={str(selector).lower()}")
    assert r["selector"] is selector and r["max_draft_len"] == 7 and r["prompts"] == N_PROMPTS
    assert [l["window"] for l in r["layers"]] == [32] * 3 and not any(l["causal"] for l in r["layers"])
    assert r["mean_acceptance_length"] == pytest.approx(1 + sum(r["acceptance_by_position"]), abs=1e-3)
    if selector:
        assert r["mean_acceptance_length"] > DFLASH2_THRESHOLD, r["mean_acceptance_length"]
    else:
        assert r["mean_acceptance_length"] < DFLASH2_THRESHOLD, r["mean_acceptance_length"]
    assert [p["tokens"] for p in r["per_prompt"]] == hf_greedy(read_prompts(prompts_file))
    assert r["matches_target"] is True


def test_causal_window_serving_loses_acceptance_not_output(capsys, prompts_file, one_thread):
    r = eval_json(capsys, "adapter=minimax_dspark", "adapter.attention.windowed_causal=true",
                  f"checkpoint={PAIR / 'dspark'}", f"target={PAIR / 'target'}", f"prompts={prompts_file}", "check=true")
    assert all(l["causal"] for l in r["layers"])
    assert r["mean_acceptance_length"] < THRESHOLD, r["mean_acceptance_length"]
    assert r["matches_target"] is True  # verification keeps the output whatever the drafter does


def test_target_from_local_hf_cache_by_repo_id(capsys, tmp_path, prompts_file, one_thread, monkeypatch):
    import huggingface_hub.constants as hub

    commit = "0" * 40
    repo = tmp_path / "hub" / "models--tiny--byte-llama"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in (PAIR / "target").iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    r = eval_json(capsys, "adapter=minimax_dspark", f"checkpoint={PAIR / 'dspark'}", "target=tiny/byte-llama",
                  f"prompts={prompts_file}")
    assert r["mean_acceptance_length"] > THRESHOLD
    rc, _, err = run_eval("adapter=minimax_dspark", f"checkpoint={PAIR / 'dspark'}", "target=tiny/absent",
                         f"prompts={prompts_file}")
    assert rc == 2 and "target=tiny/absent: not a local folder, and no snapshot" in err and len(err.strip().splitlines()) == 1


def _bad(tmp_path):
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    not_json = tmp_path / "broken.jsonl"
    not_json.write_text("{nope\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    good = tmp_path / "good.txt"
    good.write_text("def f(x):\n")
    ck, tg = f"checkpoint={PAIR / 'dspark'}", f"target={PAIR / 'target'}"
    return [
        ([ck, f"prompts={good}"], "missing target="),
        ([tg, ck], "missing prompts="),
        ([ck, tg, f"prompts={tmp_path / 'nope.txt'}"], "no such file"),
        ([ck, tg, f"prompts={bad_json}"], "bad.jsonl:2"),
        ([ck, tg, f"prompts={not_json}"], "broken.jsonl:1: not JSON"),
        ([ck, tg, f"prompts={empty}"], "no prompts"),
        ([ck, tg, f"prompts={good}", "max_new_tokens=0"], "max_new_tokens=0"),
        ([ck, tg, f"prompts={good}", "device=tpu"], "device=tpu"),
        ([ck, tg, f"prompts={good}", "format=xml"], "format=xml"),
        ([ck, tg, f"prompts={good}", "dtype=int8"], "dtype=int8"),
        ([ck, tg, f"prompts={good}", "plot=acc.txt"], "plot=acc.txt"),
        ([ck, f"target={tmp_path}", f"prompts={good}"], "no config.json"),
        ([f"checkpoint={tmp_path}", tg, f"prompts={good}"], "config.json"),
    ]


def test_user_mistakes_are_one_line_exit_2(capsys, tmp_path):
    for args, needle in _bad(tmp_path):
        rc, out, err = run_eval("adapter=minimax_dspark", *args)
        lines = [l for l in err.strip().splitlines() if l.startswith("error:")]
        assert rc == 2 and len(lines) == 1 and needle in lines[0], (args, rc, err)
        assert "Traceback" not in err


def test_read_prompts_text_and_jsonl(tmp_path):
    t = tmp_path / "p.txt"
    t.write_text("first prompt\n\n  second\n")
    assert read_prompts(t) == ["first prompt", "  second"]
    j = tmp_path / "p.jsonl"
    j.write_text(json.dumps({"prompt": "a\nb"}) + "\n\n" + json.dumps({"text": "c"}) + "\n")
    assert read_prompts(j) == ["a\nb", "c"]
    assert read_prompts(j, limit=1) == ["a\nb"]


def _train_script():
    spec = importlib.util.spec_from_file_location("train_tiny_pair", ROOT / "bench" / "train_tiny_pair.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_training_math_is_the_served_math(tmp_path, capsys, one_thread):
    """The drafter the training script optimises equals the converted checkpoint on the
    reference host: block logits of every slot, float32, random weights chosen exactly
    representable after conversion (bf16 values, MXFP8 linears, ``1 + w`` of folded norms)."""
    from draftsmith.framework.eval.drafter import Drafter
    from draftsmith.transforms.mxfp8 import dequantize, quantize

    torch.set_num_threads(1)
    ttp = _train_script()
    g = torch.Generator().manual_seed(1234)
    target = transformers.LlamaForCausalLM(transformers.LlamaConfig(**ttp.TARGET)).eval()
    with torch.no_grad():
        for p in target.parameters():
            p.copy_(p.bfloat16().float())
    d = ttp.Drafter(ttp.TARGET["hidden_size"], 256, ttp.DRAFT)
    with torch.no_grad():
        for name, p in d.named_parameters():
            if p.dim() == 1:  # norms and bias: multiples of 1/64, so 1 + w is exact in bf16
                p.copy_((torch.randn(p.shape, generator=g) * 20).round() / 64)
            else:
                p.copy_((torch.randn(p.shape, generator=g) * p.detach().std().clamp(min=0.02)).bfloat16().float())
        for layer in d.layers:
            for n in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
                w = getattr(layer, n).weight
                w.copy_(dequantize(*quantize(w, torch.uint8), torch.float32))
    ttp.pack(tmp_path, d)
    assert main(["convert", "adapter=minimax_dspark", f"source={tmp_path / 'dspark'}", f"out={tmp_path / 'conv'}"]) == 0
    host = Drafter(tmp_path / "conv", "cpu", torch.float32)
    host.borrow(target)
    tap = ttp.LayerTap(target, ttp.DRAFT["target_layer_ids"])
    t, b = 96, ttp.DRAFT["block"]
    tokens = torch.randint(0, 255, (1, t), generator=g)
    for a in (5, 40, 80):  # context shorter than, and longer than, the window
        with torch.no_grad():
            target(tokens[:, :a])
        host.reset(t)
        host.append(tap.take()[0])
        out = host.model.draft(tokens[0, a:a + 1], host.cache)
        seq = tokens.clone()
        seq[0, a + 1:a + b] = out.tokens[0, :b - 1]  # the training Markov head reads the true byte at a + j
        with torch.no_grad():
            target(seq)
            logits, _, _ = d(tap.take(), seq, torch.tensor([a]), target.model.embed_tokens.weight,
                             target.lm_head.weight)
        torch.testing.assert_close(out.logits[0], logits[0, 0], atol=2e-4, rtol=1e-4)


def test_trained_dflash2_pair_evaluates_alike_in_the_minimax_layout(capsys, prompts_file, one_thread, tmp_path):
    """The trained z-lab-layout drafter exported to the MiniMax-M3.1-Flash DFlash 2 layout
    (``adapters/minimax_dflash2.yaml``) and evaluated from there: the same acceptance, position by
    position, and the same (target-equal) output."""
    out = tmp_path / "minimax"
    assert main(["convert", "adapter=zlab_dflash2", f"source={PAIR / 'dflash2'}", f"out={out}",
                 "to=minimax_dflash2", "progress=false"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert json.loads((out / "config.json").read_text())["architectures"] == ["MiniMaxDFlash2DraftModel"]
    runs = [eval_json(capsys, f"adapter={name}", f"checkpoint={ck}", f"target={PAIR / 'target'}",
                      f"prompts={prompts_file}", "check=true")
            for name, ck in (("zlab_dflash2", PAIR / "dflash2"), ("minimax_dflash2", out))]
    zlab, minimax = runs
    assert minimax["selector"] is True and minimax["matches_target"] is True
    assert minimax["acceptance_by_position"] == zlab["acceptance_by_position"]
    assert [p["tokens"] for p in minimax["per_prompt"]] == [p["tokens"] for p in zlab["per_prompt"]]
