"""Write a kernel file with the wide build on (lab/variants/wide-ring.patch's opt-in, for
``lab/gluon_ab.py --against``): ``default_wide()`` true for two consumers at head dim 128, and the
named switches (``WIDE_KV``, ``WIDE_Q_SMEM``) set to True.

    python3 lab/wide_copy.py SRC DST [WIDE_KV] [WIDE_Q_SMEM]
"""

import sys


def switch_on(text: str, switches=()) -> str:
    """``text`` (a kernel file with a variant applied) with each of ``switches`` (module-level
    ``NAME = False`` lines, e.g. ``WIDE_KV``, ``SHARED_PRIVATE``) True: the one switch rule of the
    lab's tools and tests; refuses a name it does not hold."""
    for name in switches:
        if f"\n{name} = False" not in text:
            raise ValueError(f"no switch {name} = False")
        text = text.replace(f"\n{name} = False", f"\n{name} = True", 1)
    return text


def wide_on(text: str, switches=()) -> str:
    """:func:`switch_on`, and the wide build the default for two consumers at head dim 128."""
    at = text.index("def default_wide(consumers: int, d: int) -> bool:")
    off = text.index("    return False", at)
    text = text[:off] + "    return consumers == 2 and d == 128" + text[off + len("    return False"):]
    return switch_on(text, switches)


if __name__ == "__main__":
    src, dst, *names = sys.argv[1:]
    with open(src) as f:
        out = wide_on(f.read(), names)
    with open(dst, "w") as f:
        f.write(out)
