"""Stage 2, compile: a validated spec -> an :class:`~.adapter.Adapter` (family, renames,
transforms, lowering table) and a raw ``config.json`` -> a :class:`~.resolved.ResolvedDrafter`."""
