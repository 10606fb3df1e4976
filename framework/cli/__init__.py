"""The ``draftsmith`` command line (Hydra composes its arguments; see :mod:`.compose`)."""
