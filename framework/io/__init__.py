"""Atomic publishing of output folders (temp dir + rename)."""
