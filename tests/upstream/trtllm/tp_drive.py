"""One rank of a tensor-parallel deployment: ``python tp_drive.py JOB.json RANK``.

``JOB``: ``{world_size, tp_size, port, runs: [drive.py ARGS + {attention_dp}, ...]}``. Joins the gloo
process group (``torch.distributed``, CPU; one intra-op thread a rank), then runs every ``drive.py``
``serve`` run in this one process with the target's ``Mapping(world_size, rank, tp_size,
enable_attention_dp)`` (one pool of processes serves every adapter, with and without attention DP),
writing each run's result to ``ARGS["result"] + ".rank<R>"``.
The row-parallel all-reduces of the stand-in ``Linear`` are ``torch.distributed.all_reduce``.

Before each draft run the rank loads the same converted checkpoint into the same package through
TensorRT-LLM's own loader (``verbatim_load.py``: the ``deep/`` excerpts installed as ``tensorrt_llm``,
then forgotten again), writing ``ARGS["result"] + ".load.rank<R>"`` and the loaded tensors to
``ARGS["result"] + ".params.rank<R>.pt"``."""

import json
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(job_path, rank):
    job = json.loads(Path(job_path).read_text())
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # tp_size ranks share the machine's cores

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]))
    dist.init_process_group("gloo", rank=rank, world_size=job["world_size"])
    import drive
    import verbatim_load

    try:
        for args in job["runs"]:
            args = {**args, "mapping": {"world_size": job["world_size"], "rank": rank, "tp_size": job["tp_size"],
                                        "enable_attention_dp": args.pop("attention_dp")}}
            try:
                load = verbatim_load.main({"package_dir": args["package_dir"], "checkpoint": args["checkpoint"],
                                           "params": args["result"] + f".params.rank{rank}.pt"}, args["mapping"])
            except BaseException as e:  # noqa: BLE001
                load = {"fatal": drive.err(e)}
            Path(args["result"] + f".load.rank{rank}").write_text(json.dumps(load, default=str))
            try:
                res = drive.main(args)
            except BaseException as e:  # noqa: BLE001
                res = {"fatal": drive.err(e)}
            Path(args["result"] + f".rank{rank}").write_text(json.dumps(res, default=str))
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main(sys.argv[1], int(sys.argv[2]))
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(1)
