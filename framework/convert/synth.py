"""Synthetic source checkpoints, made by running an adapter's transforms backwards.

``synthesize`` draws target-layout weights (each from the image of the last transform
that produces it, so the round trip is exact), inverts the transforms and the renames,
and writes a source-format checkpoint (the spec's ``synth.config``, quantized tensors,
prefixed names) plus the target's borrowed tensors under ``target/``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from ...transforms.base import Binding, Context, Transform

from ..io.publish import atomic_dir, publish, remove_temp
from ..errors import UserError
from ..compile.adapter import Adapter
from ..compile.converted_config import flatten
from ..compile.dotted import pop_dotted, set_dotted
from .writer import ShardedSaver

if TYPE_CHECKING:
    import torch

SYNTH_SHARD_BYTES = 1 << 30


@dataclass
class SynthResult:
    path: Path
    config: dict  # the flattened config the checkpoint converts to
    targets: dict[str, torch.Tensor] | None  # the target-layout weights it started from


#: the writers' layouts every adapter has; others only where ``synth.layouts`` lists them
BASE_LAYOUTS = ("transformers4", "transformers5")


def layouts(adapter: Adapter) -> list[str]:
    """The ``layout=`` values ``synth`` accepts for ``adapter`` (``spec``: the template as is)."""
    return ["spec", *BASE_LAYOUTS, *(k for k in adapter.spec.synth.layouts if k not in BASE_LAYOUTS)]


def _holders(raw: dict, adapter: Adapter) -> list[dict]:
    """The top level and each ``config.sections`` section present (where backbone keys live)."""
    return [raw, *(raw[s] for s in adapter.spec.config.sections if isinstance(raw.get(s), dict))]


def apply_layout(adapter: Adapter, raw: dict, layout: str) -> None:
    """Rewrite template ``raw`` (in place) the way writer ``layout`` saves it.

    transformers 4 (``PretrainedConfig.to_dict`` in 4.x): ``rope_theta`` and ``rope_scaling``
    at the backbone's level, ``torch_dtype``. transformers 5 (5.24 ``to_diff_dict``, checked
    with ``Qwen3Config``): ``rope_parameters: {rope_theta, rope_type}`` instead, ``dtype``
    instead of ``torch_dtype``. Then the spec's ``synth.layouts[layout]`` overrides.
    """
    if layout not in layouts(adapter):
        raise UserError(f"layout={layout}: {adapter.name} has {', '.join(layouts(adapter))}")
    if layout == "spec":
        return
    tf5 = layout != "transformers4"
    for h in _holders(raw, adapter):
        params = h.pop("rope_parameters", None) or {}
        scaling = h.pop("rope_scaling", None) or {}
        theta = h.pop("rope_theta", params.get("rope_theta"))
        if theta is not None:
            rtype = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
            extra = {k: v for k, v in {**scaling, **params}.items() if k not in ("rope_theta", "rope_type", "type")}
            if tf5:
                h["rope_parameters"] = {"rope_theta": theta, "rope_type": rtype, **extra}
            else:
                h["rope_theta"] = theta
                h["rope_scaling"] = None if rtype == "default" else {"rope_type": rtype, **extra}
        for old, new in (("torch_dtype", "dtype"),) if tf5 else (("dtype", "torch_dtype"),):
            if old in h:
                h[new] = h.pop(old)
    for key, value in adapter.spec.synth.layouts.get(layout, {}).items():
        if value is None:
            pop_dotted(raw, key)
        else:
            set_dotted(raw, key, copy.deepcopy(value))


def source_config(adapter: Adapter, scale: str, layout: str = "spec") -> dict:
    """The raw ``config.json`` that ``synth`` writes at ``scale`` (``tiny`` or ``full``) in
    writer ``layout`` (:func:`apply_layout`)."""
    if scale not in ("tiny", "full"):
        raise UserError(f"scale={scale}: expected tiny or full")
    raw = copy.deepcopy(adapter.spec.synth.config)
    if scale == "tiny":
        for key, value in adapter.spec.synth.tiny.items():
            set_dotted(raw, key, copy.deepcopy(value))
    apply_layout(adapter, raw, layout)
    return raw


def inverse_apps(adapter: Adapter, layout: dict) -> list[tuple[Transform, Binding]]:
    """Bindings of every transform application, found from target names backwards."""
    names = set(layout)
    apps: list[tuple[Transform, Binding]] = []
    for t in reversed(adapter.transforms):
        produced: dict[str, Binding] = {}
        for name in sorted(names):
            if name in produced:
                continue
            b = t.bind_inverse(name, names)
            if b is not None and all(o in names for o in b.outputs):
                for o in b.outputs:
                    produced[o] = b
        stage = list({id(b): b for b in produced.values()}.values())
        for b in stage:
            names -= set(b.outputs)
            names |= set(b.inputs.values())
        apps.extend((t, b) for b in stage)
    return apps[::-1]  # source-to-target order


def _groups(layout: dict, apps: list[tuple[Transform, Binding]]) -> list[list[str]]:
    """Target names that must be synthesized together (joined through applications)."""
    parent = {n: n for n in layout}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for _, b in apps:
        names = list(b.outputs) + list(b.inputs.values())
        for n in names[1:]:
            parent[find(n)] = find(names[0])
    groups: dict[str, list[str]] = {}
    for n in layout:
        groups.setdefault(find(n), []).append(n)
    return list(groups.values())


def synthesize(adapter: Adapter, scale: str, out: Path, seed: int = 0, overwrite: bool = False,
               keep_targets: bool = False, progress: bool = False, layout: str = "spec") -> SynthResult:
    import torch

    raw = source_config(adapter, scale, layout)
    cfg = flatten(adapter, raw, where=f"{adapter.path}: synth.config")
    ctx = Context(cfg)
    layout = adapter.family.target_layout(cfg)
    apps = inverse_apps(adapter, layout)
    gen = torch.Generator().manual_seed(int(seed))
    out = Path(out)
    tmp = atomic_dir(out, overwrite, "synth")
    kept: dict[str, torch.Tensor] = {}
    try:
        saver = ShardedSaver(tmp, SYNTH_SHARD_BYTES)
        groups = _groups(layout, apps)
        for group in tqdm(groups, desc="synth", unit="group", disable=None if progress else True, leave=False):
            tensors: dict[str, torch.Tensor] = {}
            for name in group:
                if name in tensors:
                    continue
                tensors.update(_draw(adapter, apps, name, layout, gen, ctx))
            if keep_targets:
                kept.update({n: tensors[n].clone() for n in group})
            for name, t in sorted(run_inverse(apps, tensors, ctx).items()):
                saver.add(adapter.renamer.inverse(name), t)
        borrowed = _write_target(adapter, cfg, tmp / "target", gen)
        for name, of in sorted(adapter.spec.synth.shared_copies.items()):
            if of not in borrowed:
                raise UserError(f"{adapter.path}: synth.shared_copies.{name}: the target has no {of} "
                                f"({', '.join(sorted(borrowed))})")
            saver.add(name, borrowed[of].clone())
        saver.finish()
        (tmp / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
        publish(tmp, out, overwrite)
    except BaseException:
        remove_temp(tmp)
        raise
    return SynthResult(out, cfg, kept if keep_targets else None)


def run_inverse(apps: list[tuple[Transform, Binding]], tensors: dict[str, torch.Tensor], ctx: Context) -> dict[str, torch.Tensor]:
    """Run the applications backwards over ``tensors`` (target names -> transform-input names)."""
    tensors = dict(tensors)
    for t, b in reversed(apps):
        if all(o in tensors for o in b.outputs):
            tensors.update(t.inverse(b, {o: tensors.pop(o) for o in b.outputs}, ctx))
    return tensors


def _draw(adapter: Adapter, apps, name: str, layout: dict, gen, ctx) -> dict[str, torch.Tensor]:
    """Values for target ``name`` from the image of its conversion chain.

    The latest application producing ``name`` that can sample does; later
    applications then run forward on the drawn values. Else the family's default.
    """
    chain = [(t, b) for t, b in apps if name in b.outputs]
    for k in range(len(chain) - 1, -1, -1):
        t, b = chain[k]
        drawn = t.sample(b, {o: layout.get(o, layout[name]) for o in b.outputs}, gen, ctx)
        if drawn is None:
            continue
        for t2, b2 in chain[k + 1:]:
            drawn.update(t2.forward(b2, {r: drawn.pop(n) for r, n in b2.inputs.items()}, ctx))
        return drawn
    return {name: adapter.family.sample(name, layout[name], gen)}


def _write_target(adapter: Adapter, cfg: dict, where: Path, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Write the borrowed tensors of a synthetic target (embed_tokens, lm_head) and its config;
    return the tensors by name."""
    import torch
    from safetensors.torch import save_file

    where.mkdir()
    layout = adapter.family.borrowed_layout(cfg)
    tensors = {n: (torch.randn(m.shape, generator=gen) * 0.5).to(m.dtype) for n, m in layout.items()}
    save_file(tensors, str(where / "model.safetensors"), metadata={"format": "pt"})
    ids = cfg["dflash_config"]["target_layer_ids"]
    tcfg = {
        "architectures": ["SyntheticTarget"],
        "hidden_size": cfg["target_hidden_size"],
        "vocab_size": cfg["vocab_size"],
        "num_hidden_layers": max(ids) + 1,
        "torch_dtype": cfg["torch_dtype"],
    }
    (where / "config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    return tensors
