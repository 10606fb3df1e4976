"""Stand-in package (see tensorrt_llm/PROVENANCE.md)."""
