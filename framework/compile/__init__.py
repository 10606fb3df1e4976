"""Stage 2, compile: a validated spec -> an :class:`~.adapter.Adapter` (family, renames,
transforms, lowering table) and a raw ``config.json`` -> a :class:`~.resolved.ResolvedDrafter`
(:func:`~.resolve.resolve`); compile ends at that record. The converted config is rendered
from it (:mod:`.converted_config`); what TensorRT-LLM cannot serve is read off it
(:mod:`.trtllm_limits`)."""
