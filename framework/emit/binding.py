"""What a module written by ``draftsmith emit`` needs from draftsmith at run time.

An emitted module holds no conversion or mask logic of its own: it builds one
:class:`AdapterBinding` from the adapter file named in its header and asks it.

- :meth:`AdapterBinding.convert`: source tensors -> target layout (``Adapter.convert_state_dict``);
  a pass-through when the config says the tensors are already converted.
- :meth:`AdapterBinding.resolved`: the config's :class:`ResolvedDrafter` (flattening a raw
  config first); :meth:`mask_args`, :meth:`lowerings`, :meth:`needs_context_kernel`,
  :meth:`block_attention` answer from it.
- :meth:`AdapterBinding.route_config`, :meth:`routed_config_loader`: recognise the drafter's raw
  ``config.json`` by architecture and return the flattened config.

Serving a converted checkpoint reads only its ``config.json``: the adapter spec is loaded
(safe YAML, no Hydra) only to flatten and convert a raw checkpoint in memory. Emission
itself lives in :mod:`.render`.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import torch

from ...lowering.base import MaskSpec, device_class, get_lowering
from ..compile.engine import compile_spec
from ..compile.resolved import ResolvedDrafter
from ..errors import UserError
from ..io.safe_read import MAX_CONFIG_BYTES, load_json
from ..spec.loading import load_spec

# Key an in-memory routed config carries: its tensors are still in the source layout.
SOURCE_LAYOUT_KEY = "draftsmith_tensors"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def config_dict(config: Any) -> dict:
    """A plain dict from a dict, a ``transformers.PretrainedConfig`` or an attribute bag."""
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    return dict(vars(config))


class AdapterBinding:
    """One adapter, loaded lazily from the file an emitted module was generated from.

    ``sha256`` is the adapter file's hash at emission; a different file is refused
    (re-emit after editing the adapter). ``overrides`` are the emission's overrides.
    """

    def __init__(self, adapter: str, adapter_file: str, sha256: str, overrides=(),
                 spec_sha256: Optional[str] = None):
        self.name = adapter
        self.adapter_file = Path(adapter_file)
        self.sha256 = sha256
        self.overrides = list(overrides)
        self.spec_sha256 = spec_sha256

    @cached_property
    def adapter(self):
        """The compiled adapter (``draftsmith.framework.engine.Adapter``), loaded on first use."""
        if not self.adapter_file.is_file():
            raise UserError(f"{self.adapter_file}: adapter file not found (emitted module is stale)")
        actual = file_sha256(self.adapter_file)
        if actual != self.sha256:
            raise UserError(
                f"{self.adapter_file}: sha256 {actual[:12]}… differs from {self.sha256[:12]}… "
                "recorded at emission; re-run `draftsmith emit`"
            )
        spec, path = load_spec(self.name, self.overrides, adapter_dir=self.adapter_file.parent)
        adapter = compile_spec(spec, path)
        if self.spec_sha256 and adapter.spec_sha256 != self.spec_sha256:
            raise UserError(
                f"{self.adapter_file}: with overrides {self.overrides} the spec differs from the "
                "one emitted; re-run `draftsmith emit`"
            )
        return adapter

    # -- config ---------------------------------------------------------------------------
    def flat_config(self, config: Any) -> dict:
        """The flattened config: ``config`` itself if it has a ``draftsmith`` section."""
        raw = config_dict(config)
        return raw if "draftsmith" in raw else self.adapter.flatten_config(raw)

    def route_config(self, raw: Mapping) -> Optional[dict]:
        """Flattened config (tensors marked as source layout) if ``raw`` is this drafter's."""
        raw = dict(raw)
        if "draftsmith" in raw or not self.adapter.matches(raw):
            return None
        flat = self.adapter.flatten_config(raw)
        flat[SOURCE_LAYOUT_KEY] = "source"
        return flat

    def routed_config_loader(self, original: Callable) -> Callable:
        """Wrap a ``load_pretrained_config(path, ...)``-shaped loader with :meth:`route_config`."""
        binding = self

        def load_pretrained_config(model_name_or_path, *args, **kwargs):
            path = Path(model_name_or_path) / "config.json"
            if path.is_file():
                flat = binding.route_config(load_json(path, MAX_CONFIG_BYTES, "config.json"))
                if flat is not None:
                    import transformers  # optional heavy dependency: only when routing inside an engine

                    return transformers.PretrainedConfig.from_dict(flat)
            return original(model_name_or_path, *args, **kwargs)

        load_pretrained_config.__wrapped__ = original
        return load_pretrained_config

    # -- weights --------------------------------------------------------------------------
    def convert(self, weights: Mapping[str, torch.Tensor], config: Any) -> dict:
        """Target-layout tensors. Already-converted checkpoints (config with a ``draftsmith``
        section and no source-layout mark) pass through unchanged."""
        raw = config_dict(config)
        if "draftsmith" in raw and raw.get(SOURCE_LAYOUT_KEY) != "source":
            return dict(weights)
        return self.adapter.convert_state_dict(dict(weights), self.flat_config(raw))

    # -- attention (from the config's ResolvedDrafter; the spec is never read for these) --
    def resolved(self, config: Any) -> ResolvedDrafter:
        """The compiled drafter of ``config`` (flattened first when it is a raw config)."""
        return ResolvedDrafter.from_config(self.flat_config(config))

    def mask(self, config: Any, layer_idx: int) -> MaskSpec:
        return self.resolved(config).layers[layer_idx].mask

    def mask_args(self, config: Any, layer_idx: int) -> tuple[bool, tuple[int, int]]:
        """``(causal, (left, right))`` in flash-attn terms, ``-1`` unbounded."""
        mask = self.mask(config, layer_idx)
        return mask.causal, mask.bounds

    def lowerings(self, config: Any, device: str) -> list[str]:
        """The lowering each layer uses on ``device`` (``sm100`` | ``sm90`` | ``cpu``), checked."""
        return list(self.resolved(config).lowering_table(device).lowerings)

    def needs_context_kernel(self, config: Any, device: str) -> bool:
        return self.resolved(config).lowering_table(device).needs_context_kernel

    def block_attention(self, config, layer_idx, q, cache, k_blk, v_blk, scale, device=None):
        """Run layer ``layer_idx``'s lowering for ``device`` (see ``lowering/base.py``)."""
        r = self.resolved(config)
        name = r.lowering_table(device or device_class(q.device)).lowerings[layer_idx]
        return get_lowering(name).fn(q, cache, k_blk, v_blk, r.layers[layer_idx].mask, scale)
