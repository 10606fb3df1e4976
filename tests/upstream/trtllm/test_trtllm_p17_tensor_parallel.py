"""Issue 35 item 3, issue 45 point 1: tensor parallelism and attention DP across real processes (CPU, gloo).

Every adapter at tiny scale with 8 query and 4 KV heads (the MiniMax drafter's 4 KV heads; harness
``get_wide_case``), for tp 1, 2, 4 and attention DP at tp 4; tp 8 (8 > 4 KV heads: duplication) for the
MiniMax DSpark adapter (``DUPLICATION_ADAPTER``). One pool of ``tp`` processes (tp_drive.py) per
tp size serves every adapter, with and without attention DP, one round per set of adapters with distinct
architectures (one package per architecture and process, as a deployment has it). For each run a rank

1. loads the converted checkpoint into the emitted drafter through TensorRT-LLM's own loader
   (verbatim_load.py: the ``deep/`` shim installed, the drafter built through the registered builder with
   the target's ``Mapping``, ``DFlashForCausalLM.load_weights`` -> ``DecoderModelForCausalLM.load_weights``
   (``allow_partial_loading=True``) -> ``_load_weights_impl`` -> ``Linear.load_weights``, all verbatim);
   every rank's tensors must equal, bit for bit, the slice this test computes from the converted safetensors
   (shards.py), its layout what TensorRT-LLM's modules hold (``heads // tp`` query heads, ``ceil(kv / tp)``
   KV heads, ``intermediate // tp`` MLP rows; under attention DP attention and MLP unsharded, as
   TensorRT-LLM's decoder layers build ``GatedMLP`` there, ``overridden_tp_size=1``), and the fused modules'
   shard indices what ``Attention.__init__`` / ``GatedMLP.__init__`` pass;
2. drafts one block through the stand-in worker (drive.py ``serve``; the backbone again loaded through the
   verbatim ``_load_weights_impl`` / ``Linear`` the stand-in modules execute, the row-parallel all-reduce
   ``torch.distributed.all_reduce``); every rank's tokens must equal the TP 1 run's and the float64
   oracle's, its logits within tolerance."""

import json
import socket
from pathlib import Path

import pytest
import torch

from support.forkserver import start_script
import excerpts

from shards import rank_slices
from harness import SERVED as ADAPTERS, HERE, assert_matches_oracle, get_wide_case

TP_SIZES = (1, 2, 4, 8)
#: tp sizes run for one adapter only: KV duplication (8 ranks > 4 KV heads) is ``_load_weights_impl``'s
#: ``duplicate_kv_weight`` and the k/v projections' head count, the same code for every layout and drafter
#: kind; every other tensor shards there as at tp 2 and 4, which run for every adapter
KIND_ONLY = (8,)
DUPLICATION_ADAPTER = "minimax_dspark"
ATTENTION_DP_SIZES = (4,)
POOLS = [(tp, False) for tp in TP_SIZES] + [(tp, True) for tp in ATTENTION_DP_SIZES]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def pools(tmp_path_factory):
    """{(tp, attention_dp): {adapter: [rank results]}}, one process pool per tp size."""
    cases = {name: get_wide_case(name, tmp_path_factory) for name in ADAPTERS}
    rounds = []  # adapters grouped so that no process imports two packages of one architecture
    for name, case in cases.items():
        arch = case.config["architectures"][0]
        slot = next((r for r in rounds if arch not in {cases[n].config["architectures"][0] for n in r}), None)
        slot.append(name) if slot is not None else rounds.append([name])
    root = tmp_path_factory.mktemp("tp")
    out = {pool: {} for pool in POOLS}
    for tp in TP_SIZES:
        variants = [dp for t, dp in POOLS if t == tp]
        for i, names in enumerate(rounds):
            names = [n for n in names if tp not in KIND_ONLY or n == DUPLICATION_ADAPTER]
            if not names:
                continue
            runs = []
            for dp in variants:
                for name in names:
                    case = cases[name]
                    res = str(root / f"{name}.tp{tp}{'dp' if dp else ''}.json")
                    runs.append({"mode": "serve", "package_dir": str(case.package()),
                                 "checkpoint": str(case.converted), "target": str(case.target),
                                 "inputs": str(case.inputs), "arch_modules": None, "backends": ["VANILLA"],
                                 "result": res, "attention_dp": dp})
            job = root / f"job.tp{tp}.{i}.json"
            job.write_text(json.dumps({"world_size": tp, "tp_size": tp, "port": _free_port(), "runs": runs}))
            procs = [start_script(HERE / "tp_drive.py", job, r) for r in range(tp)]
            errs = []
            for p in procs:
                _, e = p.communicate(timeout=600)
                errs.append(e[-1500:] if p.returncode else "")
            for run, name in zip(runs, [n for _ in variants for n in names]):
                ranks = []
                for r in range(tp):
                    f = Path(run["result"] + f".rank{r}")
                    assert f.is_file(), f"tp {tp} rank {r} died: {errs[r]}"
                    res = json.loads(f.read_text())
                    load = Path(run["result"] + f".load.rank{r}")
                    res["verbatim_load"] = json.loads(load.read_text()) if load.is_file() else {"fatal": errs[r]}
                    res["verbatim_params"] = run["result"] + f".params.rank{r}.pt"
                    ranks.append(res)
                out[(tp, run["attention_dp"])][name] = ranks
    return out


@pytest.fixture
def wide(case, tmp_path_factory, request):
    tp = request.node.callspec.params.get("tp")
    if tp in KIND_ONLY and case.adapter != DUPLICATION_ADAPTER:
        pytest.skip(f"{case.adapter}: tp {tp} (KV heads duplicated) runs for {DUPLICATION_ADAPTER}; tp 1, 2, 4 run for it")
    return get_wide_case(case.adapter, tmp_path_factory)


def _vanilla(res):
    excerpts.skip_if_driver_lacked_them(res)
    assert "fatal" not in res, res["fatal"]["error"] + "\n" + res["fatal"]["trace"]
    return res["backends"]["VANILLA"]


@pytest.mark.builds_drafter
@pytest.mark.parametrize("tp,dp", POOLS, ids=[f"tp{t}{'-attention_dp' if d else ''}" for t, d in POOLS])
def test_every_rank_drafts_the_tp1_and_oracle_tokens(wide, pools, tp, dp):
    case = wide
    base = _vanilla(pools[(1, False)][case.adapter][0])
    for r, res in enumerate(pools[(tp, dp)][case.adapter]):
        out = _vanilla(res)
        assert_matches_oracle(case, out, f"tp {tp}{' attention DP' if dp else ''} rank {r}")
        assert out["tokens"] == base["tokens"], f"{case.adapter} tp {tp} rank {r}: tokens differ from TP 1"
        got, want = torch.tensor(out["logits"]), torch.tensor(base["logits"])
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max())), \
            f"{case.adapter} tp {tp} rank {r}: logits differ from TP 1 by {float((got - want).abs().max()):.3g}"


def _verbatim(res, where):
    load = res["verbatim_load"]
    excerpts.skip_if_driver_lacked_them(load)
    assert "fatal" not in load, f"{where}: {load['fatal']}"
    assert "load" not in load, f"{where}: TensorRT-LLM's loader refused: {load['load']['error']}\n{load['load']['trace']}"
    return load


@pytest.mark.parametrize("tp,dp", POOLS, ids=[f"tp{t}{'-attention_dp' if d else ''}" for t, d in POOLS])
def test_every_rank_loads_the_checkpoint_through_tensorrt_llms_loader(wide, pools, tp, dp):
    """Issue 45 point 1: ``DFlashForCausalLM.load_weights`` -> ``DecoderModelForCausalLM.load_weights``
    (``allow_partial_loading=True``) -> ``_load_weights_impl`` -> ``Linear.load_weights``, all verbatim
    (``verbatim_load.py``), on every rank; each rank's tensors equal, bit for bit and in dtype, the slice
    this test computes from the converted safetensors; nothing of the checkpoint is left out and nothing
    of the drafter's own modules is left unloaded (the target-shared ``embed_tokens`` / ``lm_head`` aside)."""
    case = wide
    for r, res in enumerate(pools[(tp, dp)][case.adapter]):
        where = f"{case.adapter} tp {tp}{' attention DP' if dp else ''} rank {r}"
        load = _verbatim(res, where)
        assert load["drafter_mro"][0].startswith(case.package().name + "."), f"{where}: built {load['drafter_mro'][0]}"
        got = {k: v for k, v in torch.load(res["verbatim_params"]).items()
               if "embed_tokens" not in k and "lm_head" not in k}
        want = rank_slices(case.weights, case.config, tp, r, dp)
        assert sorted(got) == sorted(want), (f"{where}: loaded {sorted(set(got) - set(want))} beyond the checkpoint, "
                                             f"missing {sorted(set(want) - set(got))}")
        bad = [f"{k} {tuple(got[k].shape)} {got[k].dtype} vs {tuple(want[k].shape)} {want[k].dtype}"
               for k in want if got[k].dtype != want[k].dtype or got[k].shape != want[k].shape or not torch.equal(got[k], want[k])]
        assert not bad, f"{where}: differs from the checkpoint's slice: " + "; ".join(bad)


@pytest.mark.parametrize("tp,dp", POOLS, ids=[f"tp{t}{'-attention_dp' if d else ''}" for t, d in POOLS])
def test_each_rank_holds_tensorrt_llms_shard(wide, pools, tp, dp):
    case = wide
    d = case.config["draftsmith"]["dims"]
    assert (d["heads"], d["kv_heads"]) == (8, 4), f"{case.adapter}: the wide synth has {d['heads']}/{d['kv_heads']} heads"
    attn_tp = 1 if dp else tp
    heads, kv = d["heads"] // attn_tp, (d["kv_heads"] + attn_tp - 1) // attn_tp
    want = {"num_heads": heads, "num_kv_heads": kv, "qkv_rows": (heads + 2 * kv) * d["head_dim"],
            "o_proj_cols": heads * d["head_dim"], "mlp_rows": 2 * d["intermediate"] // attn_tp}
    for r, res in enumerate(pools[(tp, dp)][case.adapter]):
        out = _verbatim(res, f"{case.adapter} tp {tp} rank {r}")
        idx = {k: {s: list(v) for s, v in m.items()} for k, m in out["shard_indices"].items() if k != "mlp_tp"}
        assert idx["qkv"] == idx["attention_excerpt"], \
            f"{case.adapter} tp {tp} rank {r}: qkv_proj's shard indices {idx['qkv']}, Attention.__init__'s {idx['attention_excerpt']}"
        rows = d["intermediate"] // out["shard_indices"]["mlp_tp"]  # GatedMLP.__init__ (amukkara gated_mlp.py @ e4dc0e3c)
        assert idx["gate_up"] == {"gate": [0, rows], "up": [rows, rows]}, f"{case.adapter} tp {tp} rank {r}: {idx['gate_up']}"
        assert out["rank_layout"] == want, (f"{case.adapter} tp {tp}{' attention DP' if dp else ''} rank {r}: "
                                            f"holds {out['rank_layout']}, TensorRT-LLM's modules hold {want}")
