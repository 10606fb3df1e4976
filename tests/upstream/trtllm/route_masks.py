"""TensorRT-LLM's built-in drafter classes on the configs TensorRT-LLM's own loader produced, in a
fresh process that never imports draftsmith or the emitted package.

``python route_masks.py SRC WORKDIR``: ``WORKDIR/hf_route.json`` is ``run_hf.py``'s output (the
real ``load_pretrained_config`` under transformers 5.5.4, in its own venv); ``WORKDIR/C_<adapter>``
the converted folders; ``WORKDIR/decoding.json`` ``{adapter: {decoding_type, max_draft_len}}``.
Per adapter and mask rule (``d70a2287``: the excerpt; ``pr17935``: PR #17935's statement) it builds
the drafter with the excerpt's registered builder (``_build_dflash_draft`` / ``_build_dspark_draft``)
and the excerpt's decoding-config model, then records ``_resolve_block_attention(i)`` per layer,
the worker's block widths (excerpt ``DFlashWorker`` / ``DSparkWorker``) and the slot ids
(excerpt ``dflash_draft_slot_ids``). The loaded config reaches the classes as an attribute bag
of the real config object's ``to_dict()`` (transformers 5.5.4 has no torch in its venv; the
classes only ``getattr`` it). Writes ``WORKDIR/route_masks.json``."""

import json
import sys
import traceback
import types
from pathlib import Path

SRC, W = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(Path(__file__).resolve().parent))
from excerpts import dflash_variant  # noqa: E402

sys.path.insert(0, str(SRC))
import loader  # noqa: E402


def err(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def main():
    routes = json.loads((W / "hf_route.json").read_text())
    decoding = json.loads((W / "decoding.json").read_text())
    cu = loader.config_utils()
    la = loader.llm_args()
    wk = loader.worker()
    out = {"_imported_draftsmith": None}
    for rule in ("d70a2287", "pr17935"):
        df = dflash_variant(loader, cu, rule)
        ds = loader.dspark(cu, df)
        for adapter, d in decoding.items():
            rec = out.setdefault(adapter, {})[rule] = {}
            route = routes.get(adapter) or {}
            if not route.get("ok"):
                rec["error"] = f"config did not load: {route.get('error')}"
                continue
            try:
                cfg = types.SimpleNamespace(**route["config"])
                spec_cls = la[f"{d['decoding_type']}DecodingConfig"]
                spec = spec_cls(max_draft_len=d["max_draft_len"], speculative_model=str(W / f"C_{adapter}"))
                mc = loader.ModelConfig(pretrained_config=None, spec_config=spec)
                dc = loader.ModelConfig(pretrained_config=cfg, spec_config=None)
                build = ds["_build_dspark_draft"] if d["decoding_type"] == "DSpark" else df["_build_dflash_draft"]
                loader.LOG.records.clear()
                dm = build(mc, dc, None, None)
                rec["class"] = type(dm).__name__
                rec["resolved"] = [list(dm._resolve_block_attention(i)) for i in range(cfg.num_hidden_layers)]
                rec["shift_label"] = getattr(dm, "_dspark_shift_label", None)
                rec["warnings"] = loader.LOG.warnings()
                w = (wk["DSparkWorker"] if d["decoding_type"] == "DSpark" else wk["DFlashWorker"])()
                w.spec_config = spec
                w._block_width_statements_of_lazy_init_ctx_buffers(dm)
                rec["block_width"] = w._compute_block_size
                rec["slots"] = wk["dflash_draft_slot_ids"](1, w._compute_block_size, spec.max_draft_len,
                                                           bool(rec["shift_label"]), device="cpu").tolist()
            except Exception as e:  # noqa: BLE001 - the outcome is the datum
                rec["error"] = err(e)
                rec["trace"] = traceback.format_exc(limit=4)
    out["_imported_draftsmith"] = sorted(m for m in sys.modules if m.split(".")[0] == "draftsmith")
    (W / "route_masks.json").write_text(json.dumps(out, indent=1))


main()
