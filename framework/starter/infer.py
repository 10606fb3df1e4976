"""Infer a starter adapter spec from an unknown checkpoint (``draftsmith init source=DIR out=FILE``).

Reads ``config.json`` and the safetensors headers only (no tensor data) and writes a
commented YAML spec: the family (from the tensor names), the nested config sections, the
common name prefix and the per-layer infix (``layers.{i}.decoder_layer.``) as rename
rules, known renames (``final_norm`` -> ``norm``, bare Markov / confidence names), fused
projections (``qkv_proj``, ``gate_up_proj``) as ``split`` transforms, MXFP8 (F8_E4M3
weights with ``_scale_inv`` / ``_scale`` companions, one scale per 32) as
``dequant_mxfp8``, the norm style (``use_gemma_norm`` or a Gemma ``model_type``), the
window and causality keys, and config aliases for the block size, mask token, target
layer ids and DSpark head keys found in the config. ``synth.config`` is the checkpoint's
own config; ``synth.tiny`` shrinks the keys it found.

The spec is built as an :class:`AdapterSpec`, one function per piece, each returning its
piece and writing its comments and TODOs into one :class:`~.read.Remarks`: the rename
rules and transforms (:mod:`.weights`), the config fields and section, the target-layer
convention and ``synth.tiny`` (:mod:`.config`), the attention defaults
(:mod:`.attention`), assembled here (:func:`assemble`). Target names are read from the
family's ``target_layout`` (:mod:`.layout`), the checkpoint's names under any layer
naming (:mod:`.read`). The spec is written by
:func:`draftsmith.framework.spec.commented_yaml.dump` with a map of comments by key path.
Every line it could not decide carries a ``# TODO:`` comment saying what to check or
fill in; ``draftsmith inspect adapter=FILE source=DIR`` then shows what is left. A config key
no rule reads is fixed at the value seen (``config.fixed``, with a TODO), so the spec left as
written refuses a config whose value differs; only a family or a checkpoint format calls a
key irrelevant. The attention lowerings are the family's (``family.lowering``). ``source=``
is resolved as ``convert`` resolves it (a model root: the drafter subfolder an adapter
declares, recorded in ``match.subfolders``); the ``$schema`` header line is relative to
``out`` inside the repository and absent elsewhere.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..compile.family import get_family
from ..errors import UserError
from ..io.atomic_file import head_has
from ..io.safe_read import is_regular
from ..shown import is_shown_as_is, shown
from ..spec.commented_yaml import dump
from ..spec.schema import AdapterSpec, DocsSpec, MatchSpec, SynthSpec, WeightsSpec
from .attention import attention
from .config import aliases, config, target_layer_ids, tiny
from .layout import TargetLayout, target_layout
from .read import Checkpoint, Remarks, read_checkpoint
from .weights import renames, transforms

FAMILY = "gqa_dflash"
#: the family's context tensors: their presence is the evidence for the family
CONTEXT_TENSORS = ("fc.weight", "hidden_norm.weight")


@dataclass
class Inferred:
    """What ``init`` decided (and did not)."""

    yaml: str
    todos: list[str] = field(default_factory=list)


def _snake(text: str) -> str:
    s = re.sub(r"(?<!^)(?=[A-Z])", "_", text).lower()
    s = re.sub(r"[^a-z0-9_]+", "_", s).strip("_")
    return s if re.match(r"^[a-z]", s or "") else f"adapter_{s}"


def family_comment(ck: Checkpoint, layout: TargetLayout, say: Remarks) -> None:
    """Why the family: its context tensors (``fc``, ``hidden_norm``) found, else a TODO."""
    evidence = [t for t in CONTEXT_TENSORS if t in layout.top and any(r == t for r in ck.rel.values())]
    say.comments[("family",)] = (f"tensors {', '.join(evidence)} and per-layer self_attn/mlp" if evidence
                                 else say.todo("no fc / hidden_norm tensors: is this a DFlash-family drafter?"))


def match(ck: Checkpoint, say: Remarks) -> MatchSpec:
    """Routing by the config's ``architectures`` (and ``model_type``); without architectures
    the spec is not valid yet and the TODO asks for them."""
    archs = ck.raw.get("architectures") or []
    if archs:
        spec = MatchSpec(architectures=archs)
    else:
        spec = MatchSpec.model_construct(architectures=[])
        say.comments[("match", "architectures")] = say.todo("the config has no architectures")
    if ck.raw.get("model_type"):
        spec.model_type = ck.raw["model_type"]
    return spec


def assemble(ck: Checkpoint, name: str, layout: TargetLayout, say: Remarks) -> AdapterSpec:
    """The starter spec, piece by piece (renames, transforms, fields, attention, synth)."""
    archs = ck.raw.get("architectures") or []
    family = get_family(FAMILY)
    rename = renames(ck, layout, say)
    rules = transforms(ck, layout, say)
    found = aliases(ck.merged)
    cfg = config(ck, family, found, rules, say)
    ids = target_layer_ids(ck, found, say)
    attn = attention(ck, family, say)
    small = tiny(ck, found, ids == "input")
    say.comments[("synth", "config")] = "this checkpoint's own config.json"
    say.comments[("synth", "tiny")] = ("small dims for scale=tiny; check every key" if small
                                       else say.todo("dotted-key overrides that make a small checkpoint"))
    family_comment(ck, layout, say)
    say.comments[("description",)] = say.todo("one line about the drafter")
    routing = match(ck, say)
    say.comments[("docs", "model")] = say.todo("the model name shown in the docs table")
    say.comments[("docs", "example_checkpoint")] = say.todo("a hub id or path users know")
    return AdapterSpec(
        name=name, family=FAMILY, description="drafter with architectures " + ", ".join(archs),
        match=routing, config=cfg, weights=WeightsSpec(rename=rename, transforms=rules),
        attention=attn, target_layer_ids=ids,
        docs=DocsSpec(model=archs[0] if archs else name, example_checkpoint=str(ck.source)),
        synth=SynthSpec(config=ck.raw, tiny=small),
    )


#: the spec schema in the repository (``draftsmith schema``'s output, kept by ``docs``)
REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO_ROOT / "docs" / "adapter-spec.schema.json"


def schema_line(out: Path | None) -> list[str]:
    """The ``yaml-language-server: $schema=`` header line, relative to where the spec is written
    (``out``), when it is written inside the repository holding the schema; else none."""
    if out is None or not SCHEMA_FILE.is_file():
        return []
    folder = Path(os.path.realpath(Path(out).parent))
    if not folder.is_relative_to(REPO_ROOT):
        return []
    rel = os.path.relpath(SCHEMA_FILE, folder)
    return [f"yaml-language-server: $schema={rel}"] if is_shown_as_is(rel) else []


def architectures(raw: dict, where: str) -> list[str]:
    """The config's ``architectures``: a list of names (absent: []), else a one-line error."""
    archs = raw.get("architectures")
    if archs is None:
        return []
    if not isinstance(archs, list) or not all(isinstance(a, str) and a for a in archs):
        raise UserError(f"{where}: architectures is {type(archs).__name__} {shown(json.dumps(archs)[:60])}, "
                        'expected a list of class names (e.g. ["MyDraftModel"])')
    return archs


def check_drafter(ck: Checkpoint, layout: TargetLayout, text: str) -> None:
    """Refuse a model root whose drafter sits in a subfolder no adapter declares: its own config
    is the target's (no context tensors), and a subfolder holds a checkpoint."""
    if any(r in layout.top and r in CONTEXT_TENSORS for r in ck.rel.values()):
        return
    subs = sorted(d.name for d in ck.source.iterdir() if d.is_dir() and is_regular(d / "config.json"))[:5]
    if subs:
        raise UserError(f"source={text}: no fc / hidden_norm tensors (its config.json is no drafter's: a model "
                        f"root?) and {', '.join(s + '/' for s in subs)} hold checkpoints: pass the drafter's "
                        f"folder, e.g. source={ck.source / subs[0]}")


def infer(source: Path, name: str | None = None, out: Path | None = None, text: str | None = None,
          subfolder: str | None = None) -> Inferred:
    """A starter spec for the checkpoint in ``source`` (config.json + headers only), to be
    written at ``out`` (the ``$schema`` line is relative to it); ``text``: ``source=`` as given;
    ``subfolder``: the drafter's subfolder of the model root ``text`` named (``match.subfolders``)."""
    source = Path(source)
    text = str(source) if text is None else text
    layout = target_layout(get_family(FAMILY))
    ck = read_checkpoint(source, layout)
    archs = architectures(ck.raw, f"{source / 'config.json'}")
    check_drafter(ck, layout, text)
    say = Remarks()
    spec = assemble(ck, name or _snake(archs[0] if archs else "new_drafter"), layout, say)
    if subfolder:
        spec.match.subfolders = [subfolder]
        say.comments[("match", "subfolders")] = f"the drafter's folder in the model root {text}"
    header = schema_line(out) + [
        f"{INIT_MARK.removeprefix('# ')} source={text}`; check every TODO, then run",
        f"`draftsmith inspect adapter=<this file> source={text}`.",
    ]
    return Inferred(dump(spec, header, say.comments, say.notes), say.todos)


INIT_MARK = "# Starter spec written by `draftsmith init"


def written_by_init(path: Path) -> bool:
    """``path`` is a regular file whose first lines carry init's header (:data:`INIT_MARK`)."""
    return head_has(path, INIT_MARK.encode("utf-8"))
