"""The emitted drafter at tensor parallelism: one process per rank, every rank equal to TP 1 and the oracle.

For the MiniMax DSpark adapter and one DFlash adapter (``zlab_dflash``): ``draftsmith synth`` +
``convert`` (``--scale tiny``: 8 query / 4 KV heads, so TP 8 duplicates KV heads; ``full``: the
adapter's real shapes) and ``emit ... target_architecture=MiniMaxM3SparseForCausalLM``. Then the
conformance suite's deployment (``tests/upstream/trtllm/worker_drive.py``, imported, not copied):
a serving process imports the package and exports the architecture -> module map; each rank is a
fresh worker that never imported the package, declares the map, resolves the target's class, builds
the drafter through TensorRT-LLM's verbatim ``get_registered_draft_model_builder`` with the target's
``Mapping`` and loads the converted checkpoint through the verbatim ``DFlashForCausalLM.load_weights``
chain (``$DRAFTSMITH_TRTLLM_SRC/deep/loader.py``; default ``../shared/trtllm_src`` beside the checkout;
absent: one line, exit 0). The row-parallel all-reduce is ``torch.distributed.all_reduce``: NCCL on
CUDA (NVLink multicast off: :data:`MULTICAST_OFF` in this process's and every rank's environment), gloo
on CPU (the worker's gloo init is given the NCCL backend on CUDA, nothing else changes).

Each rank drafts one step through the worker's verbatim ``dflash_forward(...)`` call at every batch
(``--batches``, default 1,16,64) plus ``--pad-rows`` padded rows (mapped to the dense arena's scratch
slot 0, as TensorRT-LLM pads a captured batch); on CUDA the step is captured in a CUDA graph and
replayed (outputs poisoned with NaN before the checked replay), on CPU it runs eagerly. Float32
throughout (the checkpoint's bf16 values, as the suite's worker computes them). Checks, per adapter,
TP and batch: every rank's tokens equal TP 1's and the float64 oracle's (``tests/support/oracles.py``, on the
first ``--oracle-seqs`` sequences), logits within ``1e-4`` of TP 1's and ``2e-3`` of the oracle's
(relative to the largest logit, as the suite's p17 / harness checks). Any difference: exit 1.

Times: ``step ms`` is the median of ``--iters`` graph replays (CUDA events; CPU: wall time of eager
calls), the slowest rank's; ``all-reduce`` / ``attention`` are their shares of an instrumented eager
step in which every all-reduce and every attention lowering call is bracketed by a device sync and a
wall clock (so the shares include launch overhead; sum over the step / the step's instrumented total).

Usage: ``python bench/tensor_parallel.py [--tp 1,2,4] [--batches 1,16,64] [--scale tiny|full]
[--adapters minimax_dspark,zlab_dflash] [--iters 20] [--workdir DIR]`` (default: a temporary folder,
removed at the end; ``--workdir`` keeps checkpoints and packages for the next run). CI runs ``--scale tiny --tp 1,2
--batches 1`` on CPU (``tests/docs/test_benches.py``).
"""

from __future__ import annotations

import argparse
import importlib
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "upstream" / "trtllm"
sys.path[:0] = [str(SUITE), str(ROOT / "tests")]

ADAPTERS = ("minimax_dspark", "zlab_dflash")
TARGET_ARCH = "MiniMaxM3SparseForCausalLM"  # worker_drive.TARGET_ARCH, the target the drafter serves
CONTEXT = {"tiny": 12, "full": 256}  # context tokens a sequence (tiny: above the tiny window of 8)
TP1_RTOL = 1e-4  # logits vs TP 1, relative to the largest |logit| (test_trtllm_p17_tensor_parallel.py)
ORACLE_RTOL = 2e-3  # logits vs the float64 oracle, relative to max(1, largest |logit|) (harness.py)
SEED = 1729
#: NVLink multicast off in NCCL, PyTorch and NVSHMEM (the GPU machines' notes: it can take the shared host's
#: GPUs out of service); set in every rank's environment, whatever the parent's
#: the environment a rank keeps beside PATH, PYTHONPATH, HOME, LD_LIBRARY_PATH (as a TensorRT-LLM worker gets
#: only what the proxy passes on)
PASSED_ON = ("CUDA_", "NCCL_", "TRITON_", "NVSHMEM_", "TORCH_")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


# -- the parent: checkpoints, packages, ranks, checks --------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare(adapter: str, root: Path, scale: str, n_seqs: int) -> dict:
    """Synthetic checkpoint, conversion, package, target folder, inputs of ``n_seqs`` sequences."""
    import torch
    from safetensors import safe_open

    from harness import cli, tiny_heads_override

    source, converted, pkg_root, target = root / "source", root / "converted", root / "emitted", root / "target"
    extra = (tiny_heads_override(adapter, 8, 4),) if scale == "tiny" else ()
    steps = [(source, ("synth", f"adapter={adapter}", f"scale={scale}", f"out={source}", f"seed={SEED}", *extra)),
             (converted, ("convert", f"adapter={adapter}", f"source={source}", f"out={converted}")),
             (pkg_root, ("emit", f"adapter={adapter}", f"out={pkg_root}", f"config={converted}",
                         f"target_architecture={TARGET_ARCH}"))]
    for out, args in steps:  # kept in --workdir between runs
        if not out.exists():
            r = cli(*args)
            if r.returncode != 0:
                raise SystemExit(f"draftsmith {args[0]} {adapter}: {(r.stderr or r.stdout).strip()[-800:]}")
    package = next(p for p in pkg_root.iterdir() if (p / "__init__.py").is_file())
    if not target.is_dir():  # the target folder as a worker gets it (the LLM args' model)
        target.mkdir()
        (target / "config.json").write_text(json.dumps({"architectures": [TARGET_ARCH]}))
        (target / "model.safetensors").symlink_to(source / "target" / "model.safetensors")
    config = json.loads((converted / "config.json").read_text())
    fc_in = None
    for f in converted.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            if "fc.weight" in st.keys():
                fc_in = st.get_slice("fc.weight").get_shape()[1]
    g = torch.Generator().manual_seed(SEED + 49)
    ctx = CONTEXT[scale]
    hidden = torch.randn(n_seqs, ctx, fc_in, generator=g).to(torch.bfloat16).float()
    anchors = torch.randint(0, config["vocab_size"], (n_seqs,), generator=g)
    inputs = root / "inputs.pt"
    torch.save({"hidden": hidden, "anchors": anchors}, inputs)
    return {"package": package, "converted": converted, "target": target, "source": source, "config": config,
            "inputs": inputs}


def serve(case: dict, src: Path, root: Path) -> dict:
    """The serving process (worker_drive.py ``serve``): what it exports to its workers."""
    args, res = root / "serve.args.json", root / "serve.json"
    args.write_text(json.dumps({"role": "serve", "src": str(src), "package_dir": str(case["package"]),
                                "result": str(res)}))
    p = subprocess.run([sys.executable, str(SUITE / "worker_drive.py"), str(args)], capture_output=True, text=True,
                       env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **MULTICAST_OFF}, timeout=600)
    if not res.is_file():
        raise SystemExit(f"serving process died: {p.stderr[-2000:]}")
    out = json.loads(res.read_text())
    if "fatal" in out:
        raise SystemExit(f"serving process: {out['fatal']['error']}")
    return out


def run_ranks(case: dict, served: dict, src: Path, root: Path, tp: int, opts) -> list[dict]:
    """``tp`` worker processes of this script (``--rank-job``); their results."""
    import yaml

    spec = yaml.safe_load((case["package"] / "speculative_config.yaml").read_text())["speculative_config"]
    port = free_port()
    procs = []
    for rank in range(tp):
        res = root / f"tp{tp}.rank{rank}.json"
        args = root / f"tp{tp}.rank{rank}.args.json"
        args.write_text(json.dumps({
            "role": "worker", "src": str(src), "exported": served["exported"], "sys_path": served["sys_path"],
            "speculative_config": spec, "target_dir": str(case["target"]), "inputs": str(case["inputs"]),
            "mapping": {"tp_size": tp, "rank": rank}, "dist_init": f"tcp://127.0.0.1:{port}", "result": str(res),
            "bench": {"batches": opts.batches, "pad_rows": opts.pad_rows, "iters": opts.iters,
                      "out": str(root / f"tp{tp}.rank{rank}")}}))
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT),
               **{k: v for k, v in os.environ.items()
                  if k in ("HOME", "LD_LIBRARY_PATH") or k.startswith(PASSED_ON)},
               **MULTICAST_OFF}
        procs.append((subprocess.Popen([sys.executable, __file__, "--rank-job", str(args)], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), res))
    out = []
    for p, res in procs:
        _, err = p.communicate(timeout=opts.rank_timeout)
        if not res.is_file():
            raise SystemExit(f"tp {tp}: a rank died: {err[-2000:]}")
        r = json.loads(res.read_text())
        for stage in ("fatal", "build", "load"):
            if stage in r:
                raise SystemExit(f"tp {tp}: {stage}: {r[stage]['error']}\n{r[stage].get('trace', '')}")
        if "error" in r["draft"]:
            raise SystemExit(f"tp {tp}: draft: {r['draft']['error']}\n{r['draft'].get('trace', '')}")
        out.append(r)
    return out


def oracle_rows(case: dict, n: int):
    """Float64 oracle (tests/support/oracles.py) tokens and logits of the first ``n`` sequences."""
    import torch
    from safetensors.torch import load_file

    from support.oracles import draft_oracle

    weights = {}
    for f in case["converted"].glob("*.safetensors"):
        weights.update(load_file(str(f)))
    tgt = load_file(str(case["source"] / "target" / "model.safetensors"))
    data = torch.load(case["inputs"])
    return [draft_oracle(case["config"], weights, tgt, data["hidden"][i], int(data["anchors"][i]))[:2]
            for i in range(n)]


def check(adapter, tp, b, rank, got, base, oracle) -> list[str]:
    """Problems of one rank's (tokens, logits) at batch ``b`` against TP 1's and the oracle's."""
    where, bad = f"{adapter} tp {tp} batch {b} rank {rank}", []
    if got["tokens"].tolist() != base["tokens"].tolist():
        bad.append(f"{where}: tokens differ from TP 1")
    want = base["logits"]
    err = float((got["logits"] - want).abs().max())
    if err > TP1_RTOL * float(want.abs().max()):
        bad.append(f"{where}: logits differ from TP 1 by {err:.3g}")
    for i, (toks, logits) in enumerate(oracle[:b]):
        if got["tokens"][i].tolist() != toks.tolist():
            bad.append(f"{where} sequence {i}: tokens {got['tokens'][i].tolist()} != oracle {toks.tolist()}")
        err = float((got["logits"][i].double() - logits).abs().max())
        if err > ORACLE_RTOL * max(1.0, float(logits.abs().max())):
            bad.append(f"{where} sequence {i}: logits differ from the oracle by {err:.3g}")
    return bad


def parent(opts) -> int:
    import torch

    import excerpts

    src = excerpts.src_dir()
    if src is None:
        print(f"skipped: {excerpts.skip_reason()}")
        return 0
    work = Path(opts.workdir or tempfile.mkdtemp(prefix="draftsmith-tp-"))
    cuda = torch.cuda.is_available()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    machine = torch.cuda.get_device_name(0) + f" x{torch.cuda.device_count()}" if cuda else \
        f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    print(f"# tensor parallel: {machine}, {'nccl + CUDA graphs' if cuda else 'gloo, eager'}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}, "
          f"scale {opts.scale}, tp {opts.tp}, batches {opts.batches} (+{opts.pad_rows} padded rows)")
    try:
        return run_all(opts, src, work)
    finally:
        if not opts.workdir:  # a folder of our own: removed; --workdir is kept for the next run
            shutil.rmtree(work, ignore_errors=True)


def run_all(opts, src: Path, work: Path) -> int:
    """Every adapter at every TP and batch: the checks, the table; 1 if any rank differs."""
    import torch

    n_seqs, failures, rows = max(opts.batches), [], []
    for adapter in opts.adapters:
        root = work / adapter
        root.mkdir(parents=True, exist_ok=True)
        case = prepare(adapter, root, opts.scale, n_seqs)
        oracle = oracle_rows(case, min(opts.oracle_seqs, n_seqs))
        served = serve(case, src, root)
        results = {tp: run_ranks(case, served, src, root, tp, opts) for tp in opts.tp}
        for tp, ranks in results.items():
            for b in opts.batches:
                base = torch.load(results[1][0]["draft"]["batches"][str(b)]["rows"])
                for r, res in enumerate(ranks):
                    got = torch.load(res["draft"]["batches"][str(b)]["rows"])
                    failures += check(adapter, tp, b, r, got, base, oracle)
                recs = [res["draft"]["batches"][str(b)] for res in ranks]
                t1 = max(x["step_ms"] for x in (y["draft"]["batches"][str(b)] for y in results[1]))
                step = max(x["step_ms"] for x in recs)
                rows.append({"adapter": adapter, "tp": tp, "batch": b, "step_ms": step, "tp1_ms": t1,
                             "all_reduce_share": max(x["all_reduce_share"] for x in recs),
                             "attention_share": max(x["attention_share"] for x in recs),
                             "graph": recs[0]["graph"], "rank_layout": ranks[0]["draft"]["rank_layout"]})
    print("| adapter | TP | heads / KV heads a rank | batch | step ms | TP 1 step ms | all-reduce share "
          "| attention share | captured |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for x in rows:
        lay = x["rank_layout"]
        print(f"| {x['adapter']} | {x['tp']} | {lay[0]} / {lay[1]} | {x['batch']} | {x['step_ms']:.3f} | "
              f"{x['tp1_ms']:.3f} | {x['all_reduce_share']:.1%} | {x['attention_share']:.1%} | "
              f"{'CUDA graph' if x['graph'] else 'eager'} |")
    print(json.dumps({"rows": rows, "failures": failures, "oracle_seqs": min(opts.oracle_seqs, n_seqs)}))
    if failures:
        print("\n".join(["FAILED: a rank differs from TP 1 or the oracle"] + failures), file=sys.stderr)
        return 1
    print(f"every rank equal to TP 1 and the float64 oracle ({len(rows)} adapter / TP / batch cells)")
    return 0


# -- one rank: worker_drive.worker with this draft step ------------------------------------------------
class Clock:
    """Accumulated wall seconds of wrapped calls while ``on`` (a device sync on each side)."""

    def __init__(self, sync):
        self.on, self.sync, self.total = False, sync, {"all_reduce": 0.0, "attention": 0.0}

    def wrap(self, kind, fn):
        def timed(*a, **k):
            if not self.on:
                return fn(*a, **k)
            self.sync()
            t = time.perf_counter()
            out = fn(*a, **k)
            self.sync()
            self.total[kind] += time.perf_counter() - t
            return out

        return timed


def bench_draft(shim, dm, a, heads):
    """Replaces ``worker_drive.draft``: the batched draft step, its checks' rows and its times."""
    import torch
    from safetensors.torch import load_file

    import timing
    import worker_drive
    from draftsmith.lowering.base import LOWERINGS, get_lowering

    opts = a["bench"]
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    clock = Clock(sync)
    for name in list(LOWERINGS):  # every attention lowering's function, where the block decode resolves it
        info = get_lowering(name)
        module = importlib.import_module(f"draftsmith.lowering.{info.module}")
        setattr(module, info.function, clock.wrap("attention", getattr(module, info.function)))
    reducers = {type(m.all_reduce) for m in dm.modules() if getattr(m, "all_reduce", None) is not None}
    for cls in reducers:
        if "__call__" in vars(cls):
            cls.__call__ = clock.wrap("all_reduce", vars(cls)["__call__"])
    dm.to(dev)
    heads = {k: v.to(dev) for k, v in heads.items()}
    call = shim.dflash_shell["worker_calls_dflash_forward"]  # the worker's verbatim dflash_forward(...) call
    data = torch.load(a["inputs"])
    tgt = load_file(str(Path(a["target_dir"]) / "model.safetensors"))
    emb, head = tgt["model.embed_tokens.weight"].float().to(dev), tgt["lm_head.weight"].float().to(dev)
    r, spec = dm._draftsmith_package.resolved, a["speculative_config"]
    blk, k_draft = r.block_size, spec["max_draft_len"]
    first = 0 if r.sample_from_anchor else 1
    layers = dm.model.layers
    a0 = layers[0].self_attn
    n_layers, nkv, hd = len(layers), a0.num_key_value_heads, a0.head_dim
    n_seqs, c = data["hidden"].shape[:2]
    g = torch.Generator().manual_seed(4242)
    # TensorRT-LLM's VANILLA dense arena [slots, L, capacity, nkv, hd]; slot 0 the padded rows' scratch slot
    kc = torch.randn(n_seqs + 1, n_layers, c + blk, nkv, hd, generator=g).to(dev)
    vc = torch.randn(n_seqs + 1, n_layers, c + blk, nkv, hd, generator=g).to(dev)
    pos = torch.arange(c, device=dev)
    with torch.no_grad():  # each sequence's context K/V, as the worker's precompute (worker_drive.draft)
        w1, w2 = heads.get("markov_head.markov_w1.weight"), heads.get("markov_head.markov_w2.weight")
        for n in range(n_seqs):
            hidden = dm.hidden_norm(dm.fc(data["hidden"][n].to(dev)))
            for i, layer in enumerate(layers):
                kc[n + 1, i, :c], vc[n + 1, i, :c] = worker_drive.context_kv(layer.self_attn, hidden, pos, r, nkv, hd)
    out: dict = {"batches": {}, "rank_layout": [a0.num_heads, nkv]}
    for b in opts["batches"]:
        rows = b + opts["pad_rows"]
        anchors = torch.cat([data["anchors"][:b], data["anchors"][:1].expand(rows - b)]).to(dev)
        ids = torch.cat([anchors[:, None], torch.full((rows, blk - 1), int(spec["mask_token_id"]), device=dev)], 1)
        inputs = {"noise_embedding": emb[ids], "query_positions": (c + torch.arange(blk, device=dev)).expand(rows, blk),
                  "num_ctx_per_req": torch.full((rows,), c, dtype=torch.int32, device=dev),
                  "ctx_k_cache": kc, "ctx_v_cache": vc,
                  "ctx_cache_batch_idx": torch.cat([torch.arange(1, b + 1), torch.zeros(rows - b, dtype=torch.long)]
                                                   ).to(dev),
                  "ctx_kv_cache": None, "ctx_page_table": None}

        def step():
            return call(dm, inputs)

        with torch.no_grad():
            step()  # resolves the lowerings, builds the buffers
            graph = None
            if cuda:
                held = {}

                def captured():
                    held["out"] = step()  # the last call is the captured one: the graph's output tensor

                graph = timing.capture_graph(captured)
                res = held["out"]
                res.fill_(float("nan"))  # poisoned: the checked rows come from the replay
                graph.replay()
                run = graph.replay
            else:
                res = step()
                run = step
            sync()
            hs = res.reshape(rows, blk, -1)[:b, first:first + k_draft].float()
            logits = hs @ head.T  # [b, K, V]
            prev, toks = anchors[:b].clone(), []
            for j in range(logits.shape[1]):
                if w1 is not None:  # the worker's Markov chain on the lm_head rows: w2 @ w1[previous token]
                    logits[:, j] += w1[prev] @ w2.T
                prev = logits[:, j].argmax(-1)
                toks.append(prev)
            path = f"{opts['out']}.b{b}.pt"
            torch.save({"tokens": torch.stack(toks, 1).cpu(), "logits": logits.cpu()}, path)
            times = []
            for _ in range(opts["iters"]):
                sync()
                t = time.perf_counter()
                run()
                sync()
                times.append(time.perf_counter() - t)
            clock.on, clock.total = True, {"all_reduce": 0.0, "attention": 0.0}
            instrumented = 0.0
            for _ in range(opts["iters"]):
                sync()
                t = time.perf_counter()
                step()
                sync()
                instrumented += time.perf_counter() - t
            clock.on = False
        out["batches"][str(b)] = {"rows": path, "step_ms": 1e3 * statistics.median(times), "graph": graph is not None,
                                  "all_reduce_share": clock.total["all_reduce"] / instrumented,
                                  "attention_share": clock.total["attention"] / instrumented}
    return out


def rank_main(args_path: str) -> None:
    """One rank: worker_drive.worker (the suite's worker, verbatim registries, builder and load) with
    :func:`bench_draft` as its draft step; on CUDA its gloo group is an NCCL group on this rank's GPU."""
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "bench"))
    import worker_drive

    a = json.loads(Path(args_path).read_text())
    torch.set_num_threads(1)  # the ranks share the machine's cores
    if torch.cuda.is_available():
        torch.cuda.set_device(a["mapping"]["rank"] % torch.cuda.device_count())
        gloo_init = dist.init_process_group

        def init_process_group(backend, **kw):
            return gloo_init("nccl", device_id=torch.device("cuda", torch.cuda.current_device()), **kw)

        dist.init_process_group = init_process_group
    worker_drive.draft = bench_draft
    try:
        res = worker_drive.worker(a)
    except BaseException as e:  # noqa: BLE001
        res = {"fatal": worker_drive.err(e)}
    if isinstance(res.get("draft"), dict) and "batches" not in res["draft"] and "error" not in res["draft"]:
        res["draft"] = {"error": "no draft results"}
    Path(a["result"]).write_text(json.dumps(res, default=str))
    if dist.is_initialized():
        dist.destroy_process_group()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tp", default="1,2", help="comma list of TP sizes (1 is always run: the reference)")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--scale", choices=("tiny", "full"), default=None, help="default: full on CUDA, tiny on CPU")
    p.add_argument("--adapters", default=",".join(ADAPTERS))
    p.add_argument("--pad-rows", type=int, default=1)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--oracle-seqs", type=int, default=4, help="sequences checked against the float64 oracle")
    p.add_argument("--workdir", default=None)
    p.add_argument("--rank-timeout", type=int, default=1800)
    p.add_argument("--rank-job", default=None, help=argparse.SUPPRESS)
    o = p.parse_args(argv)
    os.environ.update(MULTICAST_OFF)  # before torch touches a GPU
    if o.rank_job:
        rank_main(o.rank_job)
        return 0
    import torch

    o.tp = sorted({1, *(int(x) for x in o.tp.split(","))})
    o.batches = [int(x) for x in o.batches.split(",")]
    o.adapters = o.adapters.split(",")
    o.scale = o.scale or ("full" if torch.cuda.is_available() else "tiny")
    if torch.cuda.is_available() and max(o.tp) > torch.cuda.device_count():
        print(f"tp {max(o.tp)} needs {max(o.tp)} GPUs; {torch.cuda.device_count()} visible", file=sys.stderr)
        return 2
    return parent(o)


if __name__ == "__main__":
    sys.exit(main())
