"""The shipped adapter specs (``*.yaml``); this file only makes the folder a package."""

from pathlib import Path

ADAPTER_DIR = Path(__file__).resolve().parent
