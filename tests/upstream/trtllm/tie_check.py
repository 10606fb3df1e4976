"""TensorRT-LLM's tie block (excerpt: amukkara modeling_utils.py @ 6d5e1f4d, the
``tie_word_embeddings`` block of ``DecoderModelForCausalLM.__init__``) on the emitted backbone built
in the serving process through the import shim, with ``tie_word_embeddings: true`` (speculators'
DSpark drafters), at TP 1, TP 4 (rank 1) and TP 4 with attention DP. No process group is needed:
nothing communicates at construction. ``python tie_check.py ARGS.json`` (package_dir, checkpoint,
result)."""

import json
import sys
import traceback
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "shim"))


def main(a):
    import tensorrt_llm  # noqa: F401  (the shim)
    from tensorrt_llm._excerpts import mu
    from tensorrt_llm._torch.model_config import ModelConfig
    from tensorrt_llm._torch.models.modeling_utils import get_model_architecture
    from tensorrt_llm.mapping import Mapping
    from tensorrt_llm.serve import import_custom_module_dirs

    import_custom_module_dirs([Path(a["package_dir"])])
    cfg = json.loads((Path(a["checkpoint"]) / "config.json").read_text())
    out = {}
    for tp, rank, dp in ((1, 0, False), (4, 1, False), (4, 1, True)):
        key = f"tp{tp}{'-attention_dp' if dp else ''}"
        try:
            pc = types.SimpleNamespace(**{**cfg, "tie_word_embeddings": True})
            mc = ModelConfig(pretrained_config=pc, mapping=Mapping(world_size=tp, rank=rank, tp_size=tp,
                                                                    enable_attention_dp=dp))
            cls, _ = get_model_architecture(pc)
            bb = cls(mc)
            mu["_tie_block_of_decoder_model_for_causal_lm_init"](bb, mc)
            out[key] = {"tied": bb.lm_head.weight is bb.model.embed_tokens.weight}
        except Exception as e:  # noqa: BLE001 - the outcome is the datum
            out[key] = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
                        "trace": traceback.format_exc(limit=4)}
    return out


if __name__ == "__main__":
    args = json.loads(Path(sys.argv[1]).read_text())
    try:
        res = main(args)
    except BaseException as e:  # noqa: BLE001
        res = {"fatal": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=6)}
    Path(args["result"]).write_text(json.dumps(res))
