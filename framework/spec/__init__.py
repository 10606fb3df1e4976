"""Stage 1, the spec: schema, safe YAML, ``extends``, dotted overrides and validation.

The library loads specs here without Hydra; Hydra is only the command line's composer
(:mod:`draftsmith.framework.cli.compose`).
"""
