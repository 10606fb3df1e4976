"""Stage 3, convert: the plan (headers only), the hardened checkpoint reader, execution,
the sharded writer, synthetic checkpoints and export to other engines' formats."""
