"""draftsmith: declarative adapters that serve speculative-decoding drafters on TensorRT-LLM.

The code lives in four packages mapped from the repository root (see pyproject.toml):
``draftsmith.framework`` (``framework/``: schema, loading, engine, hosts, CLI),
``draftsmith.transforms`` (``transforms/``), ``draftsmith.lowering`` (``lowering/``) and
``draftsmith.adapters`` (``adapters/*.yaml``).
"""

__version__ = "0.1.0"
