"""What a package written by ``draftsmith emit`` needs from the installed draftsmith at run time.

The package carries its compiled drafter as data (``resolved.json``: the
:class:`ResolvedDrafter` dump, with per-layer masks, lowerings, norm styles and
``max_draft_len``) and no path or hash of the machine that emitted it. Importing it:

- :func:`check_engine_version`: refuses a TensorRT-LLM older than the pinned minimum in one line,
  before anything version-specific is imported;
- :class:`PackagedDrafter`: the package's ``resolved.json``, validated (:mod:`.names`), and
  :meth:`~PackagedDrafter.bind`, which checks a checkpoint's config against it;
- :class:`BoundDrafter`: the run-time rules on one checkpoint's compiled drafter
  (:meth:`~BoundDrafter.mask_args`, :meth:`~BoundDrafter.check_combination`,
  :meth:`~BoundDrafter.block_decode`, the per-rank block decode of :mod:`.forward`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Optional

import torch

from ...lowering.base import DEVICE_CLASSES, PagedKV, device_class, get_lowering
from ..compile.converted_config import render_engine_keys
from ..compile.resolved import ResolvedDrafter
from ..compile.trtllm_limits import rope_problem
from ..errors import UserError
from .forward import BlockDecode, paged_layer_cache  # noqa: F401  (re-exported)
from .forward import write_block as _write_block
from .names import MAX_PACKAGE_DATA_BYTES, check_package_data

#: The file of an emitted package holding its resolved drafter and emission facts.
PACKAGE_DATA = "resolved.json"

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?(?:(a|b|rc)(\d+))?")
_STAGE = {"a": 0, "b": 1, "rc": 2, None: 3}


def version_key(version: str) -> tuple:
    """Sortable key of a PEP 440 release string (``1.4.0rc1`` < ``1.4.0``); ValueError if unparsable."""
    m = _VERSION.match(str(version))
    if not m:
        raise ValueError(f"unparsable version {version!r}")
    major, minor, patch, stage, n = m.groups()
    return int(major), int(minor), int(patch or 0), _STAGE[stage], int(n or 0)


def check_engine_version(found: str, minimum: str, package: str) -> None:
    """Raise a one-line ImportError when TensorRT-LLM ``found`` is older than ``minimum``."""
    try:
        old = version_key(found) < version_key(minimum)
    except ValueError:
        old = True
    if old:
        raise ImportError(f"{package} needs TensorRT-LLM >= {minimum} (the draft-model registry and "
                          f"modeling_dspark); this is TensorRT-LLM {found}")


def config_dict(config: Any) -> dict:
    """A plain dict from a dict, a ``transformers.PretrainedConfig`` or an attribute bag."""
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    return dict(vars(config))


def dflash2_keys_problem(r: ResolvedDrafter, config: Mapping[str, Any]) -> Optional[str]:
    """Why the keys TensorRT-LLM's DFlash 2 path reads from ``config`` (``dflash_config``'s four,
    the top-level ``is_causal``) disagree with what :func:`~..compile.converted_config.render_engine_keys`
    renders for ``r``, or None (the converted config was edited after ``draftsmith convert``)."""
    want = render_engine_keys(r, config.get("model_type"))
    dc = config.get("dflash_config") if isinstance(config.get("dflash_config"), Mapping) else {}
    wrong = [f"dflash_config.{k} {dc.get(k)!r} (the record says {v!r})"
             for k, v in want.get("dflash_config", {}).items() if dc.get(k) != v]
    if r.dflash2 is not None and config.get("is_causal") != want["is_causal"]:
        wrong.append(f"is_causal {config.get('is_causal')!r} (the record says {want['is_causal']!r})")
    if not wrong:
        return None
    return ("the converted config disagrees with its draftsmith record on what TensorRT-LLM's DFlash 2 path "
            f"reads: {', '.join(wrong)}; re-run `draftsmith convert`")


class PackagedDrafter:
    """The resolved drafter an emitted package carries, and the run-time rules on it."""

    def __init__(self, data: Mapping[str, Any]):
        check_package_data(data)
        self.adapter: str = data["adapter"]
        self.architecture: str = data["architecture"]
        self.decoding_type: str = data["decoding_type"]
        self.backbone: Optional[str] = data["backbone"]
        self.package: str = data["package"]
        #: the target's architecture whose TensorRT-LLM class the package re-registers (None: none)
        self.target_architecture: Optional[str] = data.get("target_architecture")
        try:
            self.resolved = ResolvedDrafter.model_validate(data["resolved"])
        except ValueError as e:
            raise ValueError(f"{PACKAGE_DATA}: resolved: {str(e).splitlines()[0]}") from None
        if self.resolved.adapter != self.adapter:
            raise ValueError(f"{PACKAGE_DATA}: resolved.adapter {self.resolved.adapter!r} is not {self.adapter!r}")

    @classmethod
    def from_package(cls, package_dir: "str | Path") -> "PackagedDrafter":
        """Read and validate ``package_dir/resolved.json`` (bounded, a regular file)."""
        path = Path(package_dir) / PACKAGE_DATA
        if not path.is_file() or path.stat().st_size > MAX_PACKAGE_DATA_BYTES:
            raise ValueError(f"{path}: missing or larger than {MAX_PACKAGE_DATA_BYTES} bytes")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not JSON ({e.__class__.__name__})") from None
        return cls(data)

    def bind(self, pretrained_config: Any) -> "BoundDrafter":
        """The checkpoint's compiled drafter (its ``draftsmith`` section); a raw checkpoint or
        another adapter's is refused in one line."""
        self.refuse_raw(pretrained_config)
        r = ResolvedDrafter.from_config(config_dict(pretrained_config))
        if r.adapter != self.adapter:
            raise ValueError(f"speculative_model was converted with adapter {r.adapter}; this package serves "
                             f"adapter {self.adapter} (emit {r.adapter})")
        problem = rope_problem(r) or dflash2_keys_problem(r, config_dict(pretrained_config))
        if problem:
            raise ValueError(f"speculative_model: {problem}")
        return BoundDrafter(self.adapter, r)

    # -- config ---------------------------------------------------------------------------
    def refuse_raw(self, pretrained_config: Any) -> None:
        """One-line ValueError printing the ``draftsmith convert`` command when the drafter
        config is not a draftsmith-converted one (TensorRT-LLM's drafter path honours no
        config-loader registration in the pinned version)."""
        has = (pretrained_config.get("draftsmith") if isinstance(pretrained_config, Mapping)
               else getattr(pretrained_config, "draftsmith", None))
        if not isinstance(has, Mapping):
            raise ValueError(
                f"speculative_model is an unconverted {self.architecture} checkpoint; run `draftsmith convert "
                f"adapter={self.adapter} source=<that checkpoint> out=<dir>` and point speculative_model at <dir>")


class BoundDrafter:
    """One checkpoint's compiled drafter and the run-time rules on it."""

    def __init__(self, adapter: str, resolved: ResolvedDrafter):
        self.adapter, self.resolved = adapter, resolved
        self.masks = resolved.masks
        self._bounds = tuple((m.causal, m.bounds) for m in self.masks)
        self._tables: dict = {}
        self._decoders: dict = {}

    def mask_args(self, layer_idx: int) -> tuple[bool, tuple[int, int]]:
        """``(causal, (left, right))`` of layer ``layer_idx`` in flash-attn terms (``-1`` unbounded)."""
        return self._bounds[layer_idx]

    # -- lowerings ------------------------------------------------------------------------
    def lowerings(self, device: str) -> Optional[tuple[str, ...]]:
        """Each layer's lowering on ``device``; None for a device class the spec has no table for
        (TensorRT-LLM's own backend then runs, with its own checks). ValueError in one line when
        the spec's table does not work there."""
        if device not in DEVICE_CLASSES:
            return None
        if device in self._tables:
            return self._tables[device]
        try:
            self._tables[device] = self.resolved.lowering_table(device).lowerings
            return self._tables[device]
        except UserError as e:
            raise ValueError(f"{self.adapter} on {device}: {e} (device classes with a table: "
                             f"{', '.join(DEVICE_CLASSES)}; pass lowering overrides to `draftsmith emit`)") from None

    def check_combination(self, backend: str, device: str) -> None:
        """One-line ValueError naming the backend/lowering/device combination when it cannot run."""
        names = self.lowerings(device)
        if names is None:
            return
        for i, name in enumerate(names):
            info = get_lowering(name)
            if not info.available():
                raise ValueError(f"{self.adapter}: layer {i} lowering {name} cannot run here (attention_backend "
                                 f"{backend}, device {device}): {info.description}")

    # -- the block decode -----------------------------------------------------------------
    def block_decode(self, device: str, max_positions: int) -> "BlockDecode":
        """The block decode on ``device`` (:class:`~.forward.BlockDecode`: buffers built once,
        the lowering list resolved once)."""
        key = (device, int(max_positions))
        decode = self._decoders.get(key)
        if decode is None:
            names = self.lowerings(device)
            if names is None:
                raise ValueError(f"{self.adapter}: no lowering table for device class {device}; "
                                 f"known: {', '.join(DEVICE_CLASSES)}")
            r = self.resolved
            decode = BlockDecode(self.adapter, self.masks, [get_lowering(n).fn for n in names],
                                 r.dims.rotary_dim, r.rope.theta, max_positions, dflash2=r.dflash2 is not None,
                                 input_embedding_scale=1.0 if r.dflash2 is None else r.dflash2.input_embedding_scale)
            self._decoders[key] = decode
        return decode


def device_class_of(module: torch.nn.Module) -> str:
    """The device class of ``module``'s parameters (``cpu``, ``sm90``, ``sm100``, ``sm120`` ...)."""
    p = next(module.parameters(), None)
    return device_class(p.device if p is not None else None)


def write_block(cache: PagedKV, k: torch.Tensor, v: torch.Tensor) -> None:
    """:func:`.forward.write_block` with its own ``0..B-1`` arange (for callers outside a decode)."""
    _write_block(cache, k, v, torch.arange(k.shape[1], device=k.device))
