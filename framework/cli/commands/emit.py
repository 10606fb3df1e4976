"""``draftsmith emit adapter=NAME target=trtllm out=DIR``: write the TensorRT-LLM custom-model
package and print its summary (``max_draft_len``, ``speculative_config``, paste rows). The
adapter is compiled with the command line's ``adapter.*`` overrides; the package's
``resolved.json`` is the drafter they compile to."""

from __future__ import annotations

import sys
from pathlib import Path

from ...convert.locate import converted_by, given_folder, locate
from ...emit.render import DEFAULT, default_engine, load_drafter_config, write_package
from ...emit.serving_target import default_max_seq_len, serving_target
from ...emit.trtllm_backbone import rope_positions
from ...errors import UserError
from ...spec.loading import load_spec
from ..inputs import adapter as chosen_adapter, need, subfolders


def run(opts, spec, path) -> int:
    out = Path(need(opts, "out", "emit"))
    config = opts.get("config")
    model_text = opts.get("model")
    if config is not None and not Path(config).is_file():  # a folder, a model root or a repo id: as convert's source=
        found = locate(str(config), subfolders(spec, opts), key="config", allow_converted=True)
        if found.how:
            print(f"config={config}: using {found.path} ({found.how})", file=sys.stderr)
        if model_text is None and found.path != given_folder(str(config), "config")[0]:
            model_text = str(config)  # a model root: the target the drafter sits in
        config = found.path
    target_architecture, model = opts.get("target_architecture"), None
    if model_text is not None:
        model, arch, target_cfg = serving_target(str(model_text))
        if config is not None:
            _note_positions(config, model_text, target_cfg)
        if target_architecture is None:
            target_architecture = arch
            print(f"target_architecture={arch} (model={model_text}: its config.json's architectures[0])",
                  file=sys.stderr)
        elif target_architecture != arch:
            raise UserError(f"target_architecture={target_architecture} but model={model_text}'s config.json names "
                            f"{arch!r}; drop one, or name the model the drafter is served with")
    if spec is None:  # no adapter=: the one the converted config= records
        spec, path = _recorded_adapter(config, opts)
    adapter = chosen_adapter(spec, path, opts)
    backbone = opts.get("backbone") or DEFAULT
    backbone = None if backbone == "none" else backbone
    # overwrite= reaches atomic_dir/publish (command "emit": never a folder another command wrote)
    res = write_package(adapter, adapter.path, out, default_engine(adapter, backbone), config=config,
                        overwrite=opts["overwrite"], target_architecture=target_architecture)
    res.model = model
    print(res.summary())
    return 0


def _note_positions(config, model_text, target_cfg: dict) -> None:
    """A ``note:`` when TensorRT-LLM's default ``max_seq_len`` for the target passes the drafter's RoPE
    table (its ``max_position_embeddings``): positions past it cannot be drafted (docs/serving-on-trtllm.md
    section 4)."""
    drafter = load_drafter_config(config)
    table, served = rope_positions(drafter if isinstance(drafter, dict) else {}), default_max_seq_len(target_cfg)
    if served > table:
        print(f"note: TensorRT-LLM serves model={model_text} at max_seq_len {served} by default (from its config), "
              f"past the drafter's {table} RoPE positions (its max_position_embeddings): serve with max_seq_len: "
              f"{table} or less (docs/serving-on-trtllm.md section 4)", file=sys.stderr)


def _recorded_adapter(config, opts):
    """(spec, path) of the adapter a converted ``config=`` records (``draftsmith.adapter``); one-line
    UserError when there is no ``config=`` or it records none."""
    if config is None:
        raise UserError("emit: give adapter=NAME, or config=<a `draftsmith convert` output>, which records its adapter")
    folder = Path(config).parent if Path(config).is_file() else Path(config)
    by = converted_by(folder)
    if by is None:
        raise UserError(f"config={config}: not a `draftsmith convert` output (no draftsmith section), so it names no "
                        "adapter; convert it first, or give adapter=NAME")
    name = by.rsplit(" with ", 1)[1]
    return load_spec(name, adapter_dir=opts.get("adapter_dir"))
