"""``draftsmith init``: the ``attention`` piece of a starter spec (family defaults, the window,
the family's lowering table).

Returns its piece of the :class:`AdapterSpec` and writes its comments and TODOs into a
:class:`~.read.Remarks`.
"""

from __future__ import annotations

from ..compile.dotted import get_dotted
from ..compile.family import GQADFlash
from ..spec.schema import AttentionSpec, LoweringChoice
from .read import Checkpoint, Remarks

#: explicit causality keys of a config (either one decides over the family default)
CAUSALITY_KEYS = ("is_causal", "sliding_window_non_causal")


def attention(ck: Checkpoint, family: GQADFlash, say: Remarks) -> AttentionSpec:
    """Non-causal windowed and full layers (DFlash / DSpark), a TODO where windowed layers have
    no explicit causality key, ``window: null`` with a TODO where no window size is given, and
    the family's lowering table (``family.lowering``: the kernel on GPUs)."""
    m = ck.merged
    windowed = any(t == "sliding_attention" for t in m.get("layer_types") or []) \
        or bool(get_dotted(m, "dflash_config.use_swa"))
    explicit = [k for k in CAUSALITY_KEYS if isinstance(m.get(k), bool)]
    spec = AttentionSpec(windowed_causal=False, full_causal=False,
                         lowering={kind: LoweringChoice(**table) for kind, table in family.lowering.items()})
    say.comments[("attention", "lowering")] = f"family {family.name}'s default lowerings"
    if windowed and not explicit:
        say.comments[("attention", "windowed_causal")] = say.todo(
            "windowed layers found and no is_causal / sliding_window_non_causal key: confirm they are non-causal")
    else:
        say.comments[("attention", "windowed_causal")] = (f"from {', '.join(explicit)} in the config" if explicit
                                                          else "no windowed layers")
    say.comments[("attention", "full_causal")] = "DFlash block attention is non-causal"
    if windowed and m.get("sliding_window") is None and get_dotted(m, "dflash_config.swa_window_size") is None:
        spec.window = None
        say.comments[("attention", "window")] = say.todo("windowed layers but no sliding_window / swa_window_size: "
                                                         "give the window")
    return spec
