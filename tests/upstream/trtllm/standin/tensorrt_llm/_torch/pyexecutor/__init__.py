"""Stand-in package (see tests/upstream/trtllm/PROVENANCE.md)."""
