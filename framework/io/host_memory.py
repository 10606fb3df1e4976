"""The machine's available memory: the one reading every bound on host allocations compares to."""

from __future__ import annotations

from typing import Optional

#: where Linux reports the memory a new allocation can get without swapping
MEMINFO = "/proc/meminfo"


def available_bytes() -> Optional[int]:
    """``MemAvailable`` of :data:`MEMINFO` in bytes (what the kernel can hand out without
    swapping; free pages alone undercount it); None when the system does not report it."""
    try:
        with open(MEMINFO, "rb") as f:
            for line in f.read(1 << 16).splitlines():
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def gib(n: int) -> str:
    """``n`` bytes as GiB with two decimals (for messages)."""
    return f"{n / 2**30:.2f} GiB"
