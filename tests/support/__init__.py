"""The suite's shared helpers: one CLI runner, one relative error, the float64 oracles, the
DFlash 2 case builder, poison, the Triton-interpreter runner, ownership fixtures and the
reliability log (import as ``support.<module>``; ``tests/`` is on ``sys.path`` through its conftest)."""
