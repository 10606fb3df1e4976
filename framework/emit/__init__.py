"""Stage 5, emit: the TensorRT-LLM custom-model package (:mod:`.render`) and what it calls
at run time (:mod:`.binding`)."""
