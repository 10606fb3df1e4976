"""The compile step: a validated :class:`AdapterSpec` -> an :class:`Adapter` of pure functions.

Every name in the spec resolves here through a closed registry (family, transforms,
lowerings); unknown names fail with the file, the key path and the known names.
"""

from __future__ import annotations

import difflib
import hashlib
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from pydantic import ValidationError

from ...lowering.base import DEVICE_CLASSES
from ...transforms.base import Transform, get_transform
from ...transforms.names import NameTemplate

from ..errors import UserError
from .family import get_family
from ..spec.loading import adapter_files, key_path, load_spec
from .rename import Renamer
from .resolved import check_lowering
from ..spec.schema import AdapterSpec
from ..spec.yaml_lines import line_of, load_yaml

class Adapter:
    """A compiled spec: family, renames, transforms and the attention lowering table, all checked
    (a raw config is resolved against it by :func:`~.resolve.resolve`)."""

    def __init__(self, spec: AdapterSpec, path: Path | None = None, overrides: Sequence[str] = ()):
        """``overrides``: the ``adapter.KEY=VALUE`` arguments that made ``spec`` from the file at
        ``path``; a problem at (or under) an overridden key names the argument, not the file."""
        self.spec = spec
        self.path = path or Path(f"<{spec.name}>")
        self.name = spec.name
        self.overrides = tuple(overrides)
        blame = self.blame
        try:
            self.family = get_family(spec.family)
        except KeyError as e:
            raise UserError(f"{blame('family')}: family: {e.args[0]}") from None
        try:
            self.renamer = Renamer(spec.weights.rename)
        except ValueError as e:
            raise UserError(f"{blame('weights', 'rename')}: weights.rename: {e}") from None
        self.transforms: list[Transform] = []
        for i, rule in enumerate(spec.weights.transforms):
            key = f"weights.transforms[{i}]"
            try:
                cls = get_transform(rule.op)
            except KeyError as e:
                raise UserError(f"{blame('weights', 'transforms', i, 'op')}: {key}.op: {e.args[0]}") from None
            try:
                params = cls.Params.model_validate(rule.params)
                self.transforms.append(cls(params, rule.match))
            except ValidationError as e:
                raise UserError(*(
                    f"{blame('weights', 'transforms', i, 'params', *err['loc'])}: {key}.params.{key_path(err['loc'])}: "
                    f"{_params_msg(err, cls)}" for err in e.errors()
                )) from None
            except ValueError as e:
                raise UserError(f"{blame('weights', 'transforms', i)}: {key}: {e}") from None
        for kind, choice in spec.attention.lowering.items():
            for dev in DEVICE_CLASSES:
                check_lowering(getattr(choice, dev), dev,
                               where=f"{blame('attention', 'lowering', kind, dev)}: attention.lowering.{kind}.{dev}")
        self.check_norm_coverage()

    def blame(self, *key: str | int) -> str:
        """Who set spec key ``key`` (``("weights", "transforms", 0, "op")``): ``command line:
        adapter.K=V`` when an override reaches it (at, above or below it), else the file."""
        for arg in self.overrides:
            name = arg.lstrip("+~").split("=", 1)[0].removeprefix("adapter.")
            path = tuple(int(p) if p.isascii() and p.isdigit() else p for p in name.split("."))
            n = min(len(path), len(key))
            if path[:n] == tuple(key[:n]):
                return f"command line: {arg}"
        return str(self.path)

    def check_norm_coverage(self) -> None:
        """A drafter's norms are all Gemma (each kind folded or kept by a ``norm_fold_gemma``
        rule) or all plain: a kind left out while others are covered is a rule that missed it
        (e.g. a typo in one branch of its regex), which would store ``w`` where ``1 + w`` is meant."""
        modes = self.norm_modes()
        if not self.spec.layout.qk_norm:  # no such tensors: no rule needs to reach them
            modes = {k: m for k, m in modes.items() if k not in ("q_norm", "k_norm")}
        left = [k for k, m in modes.items() if m == "as is"]
        if left and len(left) < len(modes):
            covered = ", ".join(k for k, m in modes.items() if m != "as is")
            raise UserError(
                f"{self.path}: weights.transforms: norm_fold_gemma covers {covered} but not {', '.join(left)} "
                f"(e.g. {self.family.norm_kinds[left[0]].replace('{i}', '0')}): a drafter's norms are all Gemma "
                "or all plain; fix the rule's regex"
            )

    def rule_location(self, kind: str, index: int) -> str:
        """``file:line`` of rule ``weights.<kind>[index]`` (the file alone when unknown)."""
        try:
            _, lines = load_yaml(self.path)
        except (OSError, ValueError):
            return f"{self.path}: weights.{kind}[{index}]"
        line = line_of(lines, ("weights", kind, index))
        return f"{self.path}:{line}" if line else f"{self.path}: weights.{kind}[{index}]"

    @property
    def architectures(self) -> list[str]:
        return list(self.spec.match.architectures)

    @cached_property
    def spec_sha256(self) -> str:
        return hashlib.sha256(self.spec.model_dump_json(by_alias=True).encode()).hexdigest()

    @cached_property
    def file_sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest() if self.path.is_file() else self.spec_sha256

    @property
    def quant_methods(self) -> set[str]:
        return {t.quant_method for t in self.transforms if t.quant_method}

    def matches(self, raw: dict[str, Any]) -> bool:
        """Whether this adapter serves a raw ``config.json``: a config with speculators' marker
        ``speculators_model_type`` by that marker alone; any other by architecture (and
        ``model_type`` where the spec fixes one)."""
        m = self.spec.match
        marker = raw.get("speculators_model_type")
        if marker is not None or m.speculators_model_type is not None:
            return marker is not None and marker == m.speculators_model_type
        archs = raw.get("architectures") or []
        if not any(a in m.architectures for a in archs):
            return False
        return m.model_type is None or raw.get("model_type") == m.model_type

    def norm_modes(self) -> dict[str, str]:
        """Norm kind -> ``fold`` (stored ``1 + w``, run plainly), ``keep`` (stored ``w``, run
        Gemma style) or ``as is`` (no Gemma handling: a plain norm in the checkpoint)."""
        modes = {}
        for kind, template in self.family.norm_kinds.items():
            name = NameTemplate(template).format({"i": "0"}) if "{i}" in template else template
            mode = "as is"
            for t in self.transforms:
                if t.name == "norm_fold_gemma" and t.match.search(name):
                    mode = t.params.mode
            modes[kind] = mode
        return modes

    def norm_styles(self) -> dict[str, str]:
        """Norm kind -> ``gemma`` (kept ``w``, engine applies ``1 + w``) or ``plain``."""
        return {k: "gemma" if m == "keep" else "plain" for k, m in self.norm_modes().items()}


def _params_msg(err: dict, cls) -> str:
    """A transform-params error; an unknown key gets a did-you-mean from the op's params."""
    if err["type"] != "extra_forbidden" or len(err["loc"]) != 1:
        return err["msg"]
    known = sorted(cls.Params.model_fields)
    close = difflib.get_close_matches(str(err["loc"][0]), known, n=1)
    return f"unknown key of {cls.name} params" + (
        f" (did you mean {close[0]!r}?)" if close else f"; known: {', '.join(known) or 'none'}")


def compile_spec(spec: AdapterSpec, path: Path | None = None, overrides: Sequence[str] = ()) -> Adapter:
    return Adapter(spec, path, overrides)


def load_adapter(adapter: str, overrides=(), adapter_dir=None) -> Adapter:
    """Load, validate and compile adapter ``adapter`` (name or YAML path)."""
    overrides = tuple(overrides)
    spec, path = load_spec(adapter, overrides, adapter_dir)
    return compile_spec(spec, path, overrides)


def route(raw: dict[str, Any], adapter_dir=None, where: str = "config.json") -> Adapter:
    """The adapter serving a raw ``config.json`` (:meth:`Adapter.matches`). Several matches:
    the one whose spec says ``match.preferred``, else an error listing them; none: an error
    listing every adapter and what it matches (and any unreadable adapter file skipped)."""
    known, hits, broken = [], [], []
    for name in sorted(adapter_files(adapter_dir)):
        try:
            a = load_adapter(name, adapter_dir=adapter_dir)
        except UserError as e:  # one broken file must not break routing for every checkpoint
            broken.append(e.problems[0])
            continue
        if a.matches(raw):
            hits.append(a)
        m = a.spec.match
        known.append(f"{name} ({', '.join(a.architectures)}"
                     + (f"; speculators_model_type {m.speculators_model_type}" if m.speculators_model_type else "") + ")")
    preferred = [a for a in hits if a.spec.match.preferred]
    if len(hits) == 1:
        return hits[0]
    if len(preferred) == 1:
        return preferred[0]
    if hits:
        raise UserError(f"{where}: adapters {', '.join(a.name for a in hits)} all match "
                        f"(architectures {raw.get('architectures')}, model_type {raw.get('model_type')!r}) "
                        f"and {'several are' if preferred else 'none is'} marked `match.preferred`; pass adapter=NAME")
    raise UserError(
        f"{where}: no adapter serves architectures {raw.get('architectures')} "
        f"(model_type {raw.get('model_type')!r}"
        + (f", speculators_model_type {raw['speculators_model_type']!r}" if raw.get("speculators_model_type") else "")
        + f"); known adapters: {'; '.join(known)}; a new drafter: `draftsmith init source=<its folder> "
        "out=<name>.yaml` writes a starter adapter",
        *(f"unreadable adapter skipped while routing: {b}" for b in broken),
    )
