"""Import shim ``tensorrt_llm`` for the conformance suite: TensorRT-LLM's own excerpted objects
under their real module names, everything no excerpt covers from the transcriptions in
``standin/tensorrt_llm`` (each package's ``__path__`` falls through to the stand-in's folder).

Modules here re-export, never define, TensorRT-LLM objects: ``_torch.pyexecutor.config_utils``
(``load_pretrained_config`` & co. with this process's transformers), ``_torch.models.modeling_dflash``
/ ``modeling_dspark`` (``DFlashForCausalLM``, ``GQADSparkForCausalLM``, builders: registered in the
stand-in registry under their real module names), ``llmapi.llm_args`` (the decoding configs),
``_torch.speculative.interface`` / ``dflash`` (mode enum stub, slot ids, buffer budget),
``_torch.modules.linear`` (``WeightMode``, ``WeightsLoadingConfig`` + the stand-in ``Linear``).
The excerpts are executed once per process by :mod:`tensorrt_llm._excerpts`."""

from pathlib import Path as _Path

__path__.append(str(_Path(__file__).resolve().parents[2] / "standin" / "tensorrt_llm"))

from .pinned import PINNED_MINIMUM_VERSION as _PINNED  # noqa: E402  (stand-in file)

__version__ = _PINNED
