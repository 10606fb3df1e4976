"""Stand-ins for the TensorRT-LLM load methods ``deep/`` does not excerpt, attached by
``verbatim_load.py`` to the excerpt classes they belong to (listed in PROVENANCE.md).

Each function stands for one method, has its signature (``SIGNATURES``, checked by
``test_trtllm_standin_signatures.py`` against the recorded source signature), and does what the cited
source does, except that tensors stay on the CPU where the source moves them with ``.to("cuda")``:

- ``_load_dflash2_weights(self, weights: Dict) -> Dict``: amukkara/TensorRT-LLM
  ``tensorrt_llm/_torch/models/modeling_dflash.py`` @ d70a22876d5b0b13dcd5fee18e6dba2331c000a6,
  ``DFlashForCausalLM._load_dflash2_weights``: per layer one ``DFlash2BlockConv`` from
  ``layers.{i}.attention_conv.{base_kernel, kernel_projection.weight}`` and one from
  ``layers.{i}.mlp_conv.*`` (``taps = _dflash2_conv_taps``, ``group_size =
  _dflash2_conv_group_size``, ``hidden_size = config.hidden_size``), a ``DFlash2CandidateSelector``
  from ``candidate_selector.{predecessor_codebook, successor_codebook, hidden_projection.weight}``
  (``top_k``, ``vocab_size``, ``rank``); a missing key is a ValueError naming it; sets
  ``attention_convs`` / ``mlp_convs`` (``nn.ModuleList``) and ``candidate_selector``; returns the
  weights minus the consumed keys. The two module classes are the transcriptions in
  ``tests/upstream/trtllm/trtllm_dflash2.py`` (same commit).
- ``_take_dspark_head_weights(self, weights: Dict) -> tuple[Dict, Dict]``: NVIDIA/TensorRT-LLM
  ``tensorrt_llm/_torch/models/modeling_dspark.py`` @ 008b54fe0ce45214810a9e78853900f0f468de66,
  ``_DSparkHeadMixin._take_dspark_head_weights``: the first present alias of each
  ``_DSPARK_HEAD_WEIGHT_ALIASES`` entry (the excerpt's table) is taken out; Markov tensors shipped
  with ``markov_rank`` 0 are refused; with ``markov_rank > 0`` both must be present with shape
  ``(vocab_size, markov_rank)`` and become ``markov_w1`` / ``markov_w2``; the confidence tensors
  become ``confidence_proj_weight`` / ``confidence_proj_bias``. Returns (remaining, head weights).
- ``GQADSparkForCausalLM.load_weights(self, weights: Dict, weight_mapper=None, **kwargs)``: same
  file and commit: ``weights, _ = self._take_dspark_head_weights(weights)`` then
  ``super().load_weights(weights, weight_mapper=weight_mapper, **kwargs)``; attached outside the
  class body, so ``super()`` is spelled as the next class in the MRO that defines it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Dict

from torch import nn

#: method -> (repository, path, commit, the source's signature as ``inspect.signature`` prints it)
SIGNATURES = {
    "DFlashForCausalLM._load_dflash2_weights": (
        "amukkara/TensorRT-LLM", "tensorrt_llm/_torch/models/modeling_dflash.py",
        "d70a22876d5b0b13dcd5fee18e6dba2331c000a6", "(self, weights: Dict) -> Dict"),
    "_DSparkHeadMixin._take_dspark_head_weights": (
        "NVIDIA/TensorRT-LLM", "tensorrt_llm/_torch/models/modeling_dspark.py",
        "008b54fe0ce45214810a9e78853900f0f468de66", "(self, weights: Dict) -> tuple[Dict, Dict]"),
    "GQADSparkForCausalLM.load_weights": (
        "NVIDIA/TensorRT-LLM", "tensorrt_llm/_torch/models/modeling_dspark.py",
        "008b54fe0ce45214810a9e78853900f0f468de66", "(self, weights: Dict, weight_mapper=None, **kwargs)"),
}


def _dflash2_modules():
    path = Path(__file__).resolve().parent / "trtllm_dflash2.py"
    spec = importlib.util.spec_from_file_location("_trtllm_dflash2_transcription", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DFlash2BlockConv, module.DFlash2CandidateSelector


def _load_dflash2_weights(self, weights: Dict) -> Dict:
    block_conv, selector_cls = _dflash2_modules()
    consumed = set()

    def take(key):
        if key not in weights:
            raise ValueError(f"DFlash 2 drafter is missing checkpoint weight '{key}'. The draft checkpoint "
                             "declares DFlash 2 in its config but does not ship the corresponding weights.")
        consumed.add(key)
        return weights[key]  # the source: .to("cuda")

    hidden = self.config.hidden_size
    attention_convs, mlp_convs = nn.ModuleList(), nn.ModuleList()
    for i in range(len(self.model.layers)):
        for name, convs in (("attention_conv", attention_convs), ("mlp_conv", mlp_convs)):
            prefix = f"layers.{i}.{name}."
            convs.append(block_conv(base_kernel=take(prefix + "base_kernel"),
                                    kernel_projection_weight=take(prefix + "kernel_projection.weight"),
                                    taps=self._dflash2_conv_taps, group_size=self._dflash2_conv_group_size,
                                    hidden_size=hidden))
    selector = selector_cls(predecessor_codebook=take("candidate_selector.predecessor_codebook"),
                            successor_codebook=take("candidate_selector.successor_codebook"),
                            hidden_projection_weight=take("candidate_selector.hidden_projection.weight"),
                            top_k=self._dflash2_selector_top_k, vocab_size=self.config.vocab_size,
                            rank=self._dflash2_selector_rank)
    self.attention_convs, self.mlp_convs, self.candidate_selector = attention_convs, mlp_convs, selector
    return {k: v for k, v in weights.items() if k not in consumed}


def take_dspark_head_weights(aliases: dict):
    """``_take_dspark_head_weights`` over ``aliases`` (the excerpt's ``_DSPARK_HEAD_WEIGHT_ALIASES``)."""

    def _take_dspark_head_weights(self, weights: Dict) -> tuple[Dict, Dict]:
        heads, consumed = {}, set()
        for canonical, names in aliases.items():
            for name in names:
                if name in weights:
                    heads[canonical] = weights[name]
                    consumed.add(name)
                    break
        if consumed:
            weights = {k: v for k, v in weights.items() if k not in consumed}
        if self._dspark_markov_rank <= 0 and "markov_w1.weight" in heads:
            raise ValueError("DSpark drafter ships markov_w1/markov_w2 but markov_rank resolved to 0. The "
                             "checkpoint's head switches were not found in dspark_config, dflash_config, or at "
                             "the top level; loading it would drop the Markov head silently.")
        if self._dspark_markov_rank > 0:
            vocab, rank = self.config.vocab_size, self._dspark_markov_rank
            for k in ("markov_w1.weight", "markov_w2.weight"):
                if k not in heads:
                    raise ValueError(f"DSpark drafter declares markov_rank={rank} but the checkpoint is missing {k}.")
                if tuple(heads[k].shape) != (vocab, rank):
                    raise ValueError(f"DSpark {k} has shape {tuple(heads[k].shape)}, expected "
                                     f"[vocab, markov_rank] = ({vocab}, {rank}).")
            self.markov_w1 = heads["markov_w1.weight"]  # the source: .to("cuda")
            self.markov_w2 = heads["markov_w2.weight"]
        if "confidence_proj.weight" in heads:
            self.confidence_proj_weight = heads["confidence_proj.weight"]
        if "confidence_proj.bias" in heads:
            self.confidence_proj_bias = heads["confidence_proj.bias"]
        return weights, heads

    return _take_dspark_head_weights


def gqa_dspark_load_weights(base_load_weights):
    """``GQADSparkForCausalLM.load_weights``; ``base_load_weights`` is what ``super().load_weights``
    resolves to (``DFlashForCausalLM.load_weights``)."""

    def load_weights(self, weights: Dict, weight_mapper=None, **kwargs):
        weights, _ = self._take_dspark_head_weights(weights)
        return base_load_weights(self, weights, weight_mapper=weight_mapper, **kwargs)

    return load_weights
