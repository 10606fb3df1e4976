"""What a module written by ``draftsmith emit`` needs from draftsmith at run time.

An emitted module holds no conversion or mask logic of its own: it builds one
:class:`AdapterBinding` from the adapter file named in its header and asks it.

- :meth:`AdapterBinding.convert`: source tensors -> target layout (``Adapter.convert_state_dict``);
  a pass-through when the config says the tensors are already converted.
- :meth:`AdapterBinding.layers`: the per-layer ``{causal, window, lowering}`` table of the
  config's ``draftsmith`` section (flattening a raw config first).
- :meth:`AdapterBinding.mask_args`, :meth:`lowerings`, :meth:`needs_context_kernel`,
  :meth:`block_attention`: answers derived from that table.
- :meth:`AdapterBinding.route_config`, :meth:`routed_config_loader`: recognise the drafter's raw
  ``config.json`` by architecture and return the flattened config.

Emission itself lives in :mod:`draftsmith.framework.emit` (re-exported here as :func:`emit`).
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import torch

from ..errors import UserError

# Key an in-memory routed config carries: its tensors are still in the source layout.
SOURCE_LAYOUT_KEY = "draftsmith_tensors"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def device_class(device: Optional[torch.device] = None) -> str:
    """The host's device class (``cpu``, ``sm90``, ``sm100``, ...) of ``device``; default the
    current CUDA device when there is one, else ``cpu``."""
    from ..runtime.select import device_class as host_device_class

    if device is None:
        cuda = torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    return host_device_class(device)


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
        from ..compile.engine import compile_spec
        from ..spec.loading import load_spec

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
                flat = binding.route_config(json.loads(path.read_text()))
                if flat is not None:
                    import transformers

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

    # -- attention ------------------------------------------------------------------------
    def layers(self, config: Any) -> list[dict]:
        return list(self.flat_config(config)["draftsmith"]["layers"])

    def mask(self, config: Any, layer_idx: int):
        from ...lowering import MaskSpec

        layer = self.layers(config)[layer_idx]
        return MaskSpec(causal=bool(layer["causal"]), window=layer.get("window"))

    def mask_args(self, config: Any, layer_idx: int) -> tuple[bool, tuple[int, int]]:
        """``(causal, (left, right))`` in flash-attn terms, ``-1`` unbounded."""
        mask = self.mask(config, layer_idx)
        return mask.causal, mask.bounds

    def lowerings(self, config: Any, device: str) -> list[str]:
        """The lowering each layer uses on ``device`` (``sm100`` | ``sm90`` | ``cpu``)."""
        names = [layer["lowering"].get(device) for layer in self.layers(config)]
        if None in names:
            raise UserError(f"adapter {self.name}: layer {names.index(None)} has no lowering for {device}")
        return names

    def needs_context_kernel(self, config: Any, device: str) -> bool:
        from ...lowering import get_lowering

        return any(get_lowering(n).needs_context_kernel for n in self.lowerings(config, device))

    def block_attention(self, config, layer_idx, q, cache, k_blk, v_blk, scale, device=None):
        """Run layer ``layer_idx``'s lowering for ``device`` (see ``lowering/base.py``)."""
        from ...lowering import get_lowering

        name = self.lowerings(config, device or device_class(q.device))[layer_idx]
        return get_lowering(name).fn(q, cache, k_blk, v_blk, self.mask(config, layer_idx), scale)


def emit(*args, **kwargs):
    """See :func:`draftsmith.framework.emit.emit`."""
    from .render import emit as _emit

    return _emit(*args, **kwargs)


def cli(opts: dict, adapter) -> int:
    """``draftsmith emit adapter=NAME target=trtllm out=DIR``: write the package, print the
    summary (``max_draft_len``, ``speculative_config``, paste rows). ``adapter`` is compiled
    with the command line's ``adapter.*`` overrides, which the module records."""
    from .render import DEFAULT, default_engine, spec_overrides, write_package

    target = opts.get("target") or "trtllm"
    if target != "trtllm":
        raise UserError(f"draftsmith emit: target={target}: unknown; known: trtllm")
    if opts.get("out") in (None, ""):
        raise UserError("draftsmith emit: missing out=...")
    res = write_package(
        adapter, adapter.path, Path(opts["out"]), default_engine(adapter.name, DEFAULT),
        overrides=spec_overrides(adapter, opts.get("adapter_dir")),
    )
    print(res.summary())
    return 0
