"""Stage 3, convert: the plan (:func:`~.plan.plan`, headers only), the hardened checkpoint
reader, execution (:func:`~.execute.convert`: plan and execute), the sharded writer, synthetic
checkpoints and export to other engines' formats."""
