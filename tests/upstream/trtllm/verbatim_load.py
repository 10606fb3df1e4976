"""Load a converted checkpoint into the emitted drafter through TensorRT-LLM's own loader, in one rank.

``main(args, mapping)`` installs the verbatim shim of ``$DRAFTSMITH_TRTLLM_SRC/deep`` (``loader.py``:
``Mapping``, ``Linear`` and its fused load helpers, ``DecoderModel`` / ``DecoderModelForCausalLM``,
``_load_weights_impl``, the registries), imports the emitted package as ``--custom_module_dirs``
does, builds the drafter through ``get_registered_draft_model_builder`` with the target's
``Mapping(**mapping)``, and calls ``load_weights(weights=..., weight_mapper=None)``:
``DFlashForCausalLM.load_weights`` is the excerpt's (amukkara ``modeling_dflash.py`` @ d70a2287, with
``_assert_backbone_complete``), which hands the backbone to ``DecoderModelForCausalLM.load_weights``
with ``allow_partial_loading=True`` -> ``_load_weights_impl`` -> ``Linear.load_weights``. The methods
``deep/`` does not excerpt (``_load_dflash2_weights``, ``_take_dspark_head_weights``,
``GQADSparkForCausalLM.load_weights``) are the stand-ins of ``loader_standins.py``.

``python verbatim_load.py ARGS.json`` runs it in a fresh process (``ARGS``: these plus ``mapping``
and ``result``). ``args``: ``package_dir``, ``checkpoint``, ``params`` (where the rank's loaded tensors are saved,
``torch.save``). The ``spec_config`` is the excerpt's ``DFlashDecodingConfig`` / ``DSparkDecodingConfig``
(``../trtllm_src/llm_args_excerpt.py``) built from the package's ``speculative_config.yaml``. Returns a
JSON-able record (class, builder, rank layout, or ``{"load": error}``). ``purge()`` leaves the process as it
was before ``install()`` (no ``tensorrt_llm`` module, no package module, no zoo finder)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import traceback
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: the DSpark head tensors TensorRT-LLM keeps as plain attributes (``_DSparkHeadMixin``)
HEAD_ATTRIBUTES = ("markov_w1", "markov_w2", "confidence_proj_weight", "confidence_proj_bias")


def deep_loader():
    """``deep/loader.py`` as a module (not installed)."""
    import excerpts

    src = excerpts.src_dir()
    if src is None:
        raise RuntimeError(excerpts.skip_reason())
    spec = importlib.util.spec_from_file_location("trtllm_deep_loader", src / "deep" / "loader.py")
    ld = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ld)
    return ld


def attach_load_methods(shim):
    """Give the excerpt classes the load methods TensorRT-LLM defines on them: the verbatim ones of
    ``dflash_excerpt.py`` (same class, same commit; the loader attaches ``_validate_dflash2_config``
    from there the same way) and the stand-ins for those not excerpted."""
    import loader_standins

    dflash = importlib.import_module("tensorrt_llm._torch.models.modeling_dflash")
    dspark = importlib.import_module("tensorrt_llm._torch.models.modeling_dspark")
    shell = shim.dflash_shell["DFlashLoadShell"].__dict__
    DF = dflash.DFlashForCausalLM
    for name in ("load_weights", "_assert_backbone_complete", "WRAPPER_OWNED_WEIGHTS", "WEIGHTS_SHARED_WITH_TARGET"):
        setattr(DF, name, shell[name])
    DF._load_dflash2_weights = loader_standins._load_dflash2_weights
    dspark._DSparkHeadMixin._take_dspark_head_weights = loader_standins.take_dspark_head_weights(
        dspark._DSPARK_HEAD_WEIGHT_ALIASES)
    dspark.GQADSparkForCausalLM.load_weights = loader_standins.gqa_dspark_load_weights(DF.load_weights)


def purge(package_name: str | None = None) -> None:
    """Forget the shim, the package and draftsmith's per-process install record of it (the next
    import of the package in this process installs it again, as in a fresh process)."""
    from draftsmith.framework.emit import runtime

    runtime._INSTALLED.clear()
    for name in list(sys.modules):
        if name == "tensorrt_llm" or name.startswith("tensorrt_llm.") or (
                package_name and (name == package_name or name.startswith(package_name + "."))):
            del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_ZooFinder"]


def loaded_config(checkpoint: Path):
    """The converted ``config.json`` as the attribute bag ``deep/`` assumes for the loaded
    ``PretrainedConfig`` (``torch_dtype`` a ``torch.dtype``)."""
    import torch

    raw = json.loads((checkpoint / "config.json").read_text())
    cfg = types.SimpleNamespace(**raw)
    cfg.torch_dtype = getattr(torch, raw.get("torch_dtype") or "float32")
    return cfg


def decoding_config(pkg: Path):
    """The excerpt's decoding config of the package's snippet (``attention_backend`` as emitted)."""
    import yaml

    import excerpts

    sys.path.insert(0, str(excerpts.src_dir()))
    src_loader = importlib.import_module("loader")
    snippet = yaml.safe_load((pkg / "speculative_config.yaml").read_text())["speculative_config"]
    return src_loader.llm_args()[snippet["decoding_type"] + "DecodingConfig"](**snippet)


def main(args: dict, mapping: dict) -> dict:
    import torch
    from safetensors.torch import load_file

    # _load_weights_impl's parallel branch (run_concurrently) is not excerpted: the serial branch,
    # which TensorRT-LLM takes under this variable, is the same per-module call
    os.environ["TRT_LLM_DISABLE_LOAD_WEIGHTS_IN_PARALLEL"] = "1"
    pkg = Path(args["package_dir"])
    purge(pkg.name)  # whatever this process imported before (the stand-in, the package) is not seen
    ld = deep_loader()
    shim = ld.install()
    out: dict = {}
    try:
        attach_load_methods(shim)
        sys.path.insert(0, str(pkg.parent))
        importlib.import_module(pkg.name)  # as --custom_module_dirs imports it
        mu = importlib.import_module("tensorrt_llm._torch.models.modeling_utils")
        m = shim.Mapping(**mapping)
        spec = decoding_config(pkg)
        cfg = loaded_config(Path(args["checkpoint"]))
        model_config = shim.ModelConfig(pretrained_config=None, spec_config=spec, mapping=m)
        draft_config = shim.ModelConfig(pretrained_config=cfg, spec_config=spec, mapping=m)
        builder = mu.get_registered_draft_model_builder(shim.Mode[spec.decoding_type.upper()])
        out["builder"] = f"{builder.__module__}.{builder.__qualname__}"
        dm = builder(model_config, draft_config, None, None)
        out["drafter_mro"] = [c.__module__ + "." + c.__name__ for c in type(dm).__mro__]
        weights = {}
        for f in sorted(Path(args["checkpoint"]).glob("*.safetensors")):
            weights.update(load_file(str(f)))
        dm.load_weights(weights=weights, weight_mapper=None)
        a0, mlp0 = dm.model.layers[0].self_attn, dm.model.layers[0].mlp
        out["rank_layout"] = {"num_heads": a0.num_heads, "num_kv_heads": a0.num_key_value_heads,
                              "qkv_rows": int(a0.qkv_proj.weight.shape[0]),
                              "o_proj_cols": int(a0.o_proj.weight.shape[1]),
                              "mlp_rows": int(mlp0.gate_up_proj.weight.shape[0])}
        d = dm.config
        shell = ld.modules_excerpt(shim)["AttentionTPShell"](
            hidden_size=d.hidden_size, num_attention_heads=d.num_attention_heads,
            num_key_value_heads=d.num_key_value_heads, head_dim=a0.head_dim, bias=False, dtype=torch.float32,
            config=shim.ModelConfig(mapping=m))
        out["shard_indices"] = {  # the emitted modules' and TensorRT-LLM's own Attention.__init__ (00547a25)
            "qkv": a0.qkv_proj.fused_weight_shard_indices_mapping,
            "attention_excerpt": shell.qkv_proj.fused_weight_shard_indices_mapping,
            "gate_up": mlp0.gate_up_proj.fused_weight_shard_indices_mapping, "mlp_tp": mlp0.gate_up_proj.tp_size}
        params = {n: p.detach().clone() for n, p in dm.named_parameters()}
        params.update({n: getattr(dm, n).clone() for n in HEAD_ATTRIBUTES if getattr(dm, n, None) is not None})
        torch.save(params, args["params"])
    except BaseException as e:  # noqa: BLE001 - the outcome is the datum
        out["load"] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=8)}
    finally:
        purge(pkg.name)
        if str(pkg.parent) in sys.path:
            sys.path.remove(str(pkg.parent))
    return out


if __name__ == "__main__":
    a = json.loads(Path(sys.argv[1]).read_text())
    try:
        res = main(a, a.get("mapping") or {})
    except BaseException as e:  # noqa: BLE001
        res = {"fatal": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=8)}
    Path(a["result"]).write_text(json.dumps(res, default=str))
