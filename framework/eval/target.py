"""The target of ``draftsmith eval``: a Hugging Face causal LM, read from local files only.

:class:`Target` loads ``AutoModelForCausalLM`` and its tokenizer from a folder (a model root
as downloaded is one), or from a repo id already in the local Hugging Face cache, resolved as
``draft`` resolves ``target=`` (runtime/target_folder.py; never the network). It records the
**outputs** of the decoder layers the drafter names (forward hooks on
``get_decoder().layers[i]``, the convention of converted configs, docs/converted-format.md),
and keeps a KV cache that a verification step can crop.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Optional

import torch

from ..errors import UserError
from ..runtime.target_folder import target_folder

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def import_transformers():
    """``transformers``, or a one-line :class:`UserError` saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise UserError("draftsmith eval needs transformers: pip install transformers") from None
    return transformers


def resolve(source: str | Path) -> Path:
    """``target=source`` resolved as ``draft`` resolves it (runtime/target_folder.py): a folder,
    a model root, or a repo id in the local Hugging Face cache only."""
    return target_folder(str(source))


class Target:
    """A causal LM with layer-output taps and a croppable KV cache (batch 1).

    ``layer_ids``: decoder layers whose outputs :meth:`prefill` and :meth:`extend` return,
    concatenated in this order along the last dim (``[T, len(layer_ids) * hidden]``).
    ``dtype``: ``None`` keeps the checkpoint's own dtype (``self.dtype`` says which).
    """

    def __init__(self, source: str | Path, layer_ids: list[int], device: torch.device | str = "cpu",
                 dtype: Optional[torch.dtype] = None):
        tf = import_transformers()
        self.path = resolve(source)
        self.device = torch.device(device)
        try:
            self.tokenizer = tf.AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        except Exception as e:
            raise UserError(f"target={source}: no usable tokenizer ({type(e).__name__}: {str(e).splitlines()[0][:160]})") from None
        try:
            self.model = tf.AutoModelForCausalLM.from_pretrained(
                str(self.path), dtype=dtype if dtype is not None else "auto", local_files_only=True)
        except Exception as e:
            raise UserError(f"target={source}: cannot load a causal LM ({type(e).__name__}: {str(e).splitlines()[0][:160]})") from None
        self.model.to(self.device).eval()
        self.dtype = next(self.model.parameters()).dtype
        layers = self.model.get_decoder().layers
        bad = [i for i in layer_ids if not 0 <= i < len(layers)]
        if bad:
            raise UserError(f"target={source}: the drafter reads outputs of layers {bad}, the target has {len(layers)}")
        self.layer_ids = list(layer_ids)
        self._taps: dict[int, torch.Tensor] = {}
        for i in set(self.layer_ids):
            layers[i].register_forward_hook(self._hook(i))
        gen = getattr(self.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        eos = self.model.config.eos_token_id if eos is None else eos
        self.eos: set[int] = set() if eos is None else ({eos} if isinstance(eos, int) else set(eos))
        self.cache = None
        # transformers >= 5.2x names the cache argument ``cache`` (``past_key_values`` before)
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def _hook(self, i: int):
        def hook(_module, _inputs, output):
            self._taps[i] = output[0] if isinstance(output, tuple) else output
        return hook

    @property
    def hidden_size(self) -> int:
        return int(self.model.get_input_embeddings().weight.shape[1])

    @property
    def max_positions(self) -> Optional[int]:
        """The target's ``max_position_embeddings`` (its text config's), or None if it has none."""
        cfg = self.model.config
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        n = getattr(cfg, "max_position_embeddings", None)
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None

    def shared_modules(self):
        """What the drafter borrows, in the HF causal-LM shape ``.model.embed_tokens`` / ``.lm_head``."""
        from types import SimpleNamespace

        return SimpleNamespace(model=SimpleNamespace(embed_tokens=self.model.get_input_embeddings()),
                               lm_head=self.model.get_output_embeddings())

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    @torch.inference_mode()
    def _run(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=x, use_cache=True, **{self._cache_arg: self.cache})  # updates self.cache
        hidden = torch.cat([self._taps[i][0] for i in self.layer_ids], -1)
        self._taps = {}
        return out.logits[0].float(), hidden

    def prefill(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Start a sequence: ``(logits [T, V] float32, layer outputs [T, n*hidden])`` of ``ids``."""
        tf = import_transformers()
        self.cache = tf.DynamicCache(config=self.model.config)
        return self._run(ids)

    def extend(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``ids`` after what the cache holds; same outputs as :meth:`prefill`, for ``ids``."""
        return self._run(ids)

    def crop(self, length: int) -> None:
        """Keep the first ``length`` tokens of the cache (drop rejected drafts)."""
        drop = self.cache.get_seq_length() - length
        if drop > 0:  # a negative count removes that many tokens in every transformers 4.4x/5.x
            self.cache.crop(-drop)
