"""Load the converted checkpoint's q/k/v and gate/up into the emitted backbone's fused modules
through TensorRT-LLM's own loader statements, in a fresh process.

``python fused_load.py ARGS.json`` (``src``, ``package_dir``, ``checkpoint``, ``result``). The
backbone is built as in the serving process (the emitted package imported with the stand-in
building blocks on ``sys.path``); every module named like a ``params_map`` key then goes through
the excerpt's fused branch of ``_load_weights_impl.load_single_module`` (amukkara/TensorRT-LLM
modeling_utils.py @ 6d5e1f4d) and ``LinearMethodBase.load_weights``'s weight-mode dispatch (linear.py
excerpt), on the loader's ``Linear`` carrying that module's ``weights_loading_config`` (an absent one
is ``WeightsLoadingConfig()``, i.e. VANILLA, as the real ``Linear`` defaults it). ``params_map`` is
``_load_weights_impl``'s default (NVIDIA modeling_utils.py ``_load_weights_impl``, index id
1046435088): ``{qkv_proj: [q_proj, k_proj, v_proj], gate_up_proj: [gate_proj, up_proj]}``."""

import importlib
import json
import sys
import traceback
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARAMS_MAP = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def main(a):
    sys.path.insert(0, a["src"])
    import loader

    mu = loader.modeling_utils()
    sys.path.insert(0, str(HERE / "standin"))
    from safetensors.torch import load_file

    from tensorrt_llm._torch.model_config import ModelConfig
    from tensorrt_llm._torch.models.modeling_utils import get_model_architecture

    pkg = Path(a["package_dir"])
    sys.path.insert(0, str(pkg.parent))
    drafter = importlib.import_module(f"{pkg.name}.drafter")
    cfg = types.SimpleNamespace(**json.loads((Path(a["checkpoint"]) / "config.json").read_text()))
    backbone_cls, _ = get_model_architecture(cfg)  # what the package registered for its architecture
    backbone = backbone_cls(ModelConfig(pretrained_config=cfg))
    weights = {}
    for f in sorted(Path(a["checkpoint"]).glob("*.safetensors")):
        weights.update({f"model.{k}": v for k, v in load_file(str(f)).items()})
    out = {"modules": {}}
    for name, module in backbone.named_modules():
        if name.split(".")[-1] not in PARAMS_MAP:
            continue
        parent = backbone.get_submodule(name.rsplit(".", 1)[0])
        wlc = getattr(module, "weights_loading_config", None)
        mode = getattr(getattr(wlc, "weight_mode", None), "value", None) or "vanilla"
        rec = out["modules"][name] = {"dicts": len(PARAMS_MAP[name.split(".")[-1]]), "built_by": type(parent).__module__ + "." + type(parent).__name__,
                                      "emitted": type(parent).__module__.split(".")[0] in (pkg.name, "draftsmith"), "mode": mode}
        probe = mu["Linear"](module.in_features, module.out_features, bias=getattr(module, "bias", None) is not None,
                             weights_loading_config=mu["WeightsLoadingConfig"](weight_mode=mu["WeightMode"](mode)))
        try:
            mu["_fused_branch_of_load_single_module"](name, probe, weights, PARAMS_MAP, cfg.num_key_value_heads, 1,
                                                      False)
            rec["ok"] = True
        except Exception as e:  # noqa: BLE001 - the outcome is the datum
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["trace"] = traceback.format_exc(limit=3)
    return out


if __name__ == "__main__":
    args = json.loads(Path(sys.argv[1]).read_text())
    try:
        res = main(args)
    except BaseException as e:  # noqa: BLE001
        res = {"fatal": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=6)}
    Path(args["result"]).write_text(json.dumps(res))
