"""The conversion plan and loading report as the command line shows them: one JSON-ready
record (:func:`plan_dict`, ``format=json``), and the same record as text (:func:`describe_plan`)
with the plan's sizes and every value's source; names from the checkpoint are escaped
(:func:`~draftsmith.framework.shown.shown`)."""

from __future__ import annotations

from ..compile.resolved import ResolvedDrafter, defaulted, dump_sources
from ..compile.trtllm_limits import trtllm_warning
from .plan import Problem, format_report as format_plan_rows
from ..shown import shown


def plan_dict(plan, problems: bool = True) -> dict:
    """The plan and loading report as JSON-ready data (``format=json``); ``problems=False``
    leaves the problem rows empty (the text prints them apart, escaped: :func:`problems_report`)."""
    r = plan.resolved
    rows = _tensor_rows(plan)
    return {
        "source": str(plan.source), "adapter": r.adapter, "family": r.family,
        "dtype": r.dims.dtype, "max_draft_len": r.max_draft_len,
        "layers": [{"causal": l.mask.causal, "window": l.mask.window, "lowering": dict(l.lowering)} for l in r.layers],
        "outputs": {o: {"shape": list(m.shape), "dtype": str(m.dtype).replace("torch.", ""),
                        "from": rows.get(o, ([], ""))[0], "transforms": rows.get(o, ([], ""))[1]}
                    for o, m in plan.outputs.items()},
        "defaults": defaults_json(r), "dropped": list(plan.dropped), "ignored": list(plan.ignored),
        "complete": plan.complete, "problems": plan.report().splitlines() if problems and not plan.complete else [],
        "warnings": [w for w in (trtllm_warning(r),) if w],
    }


def describe_plan(plan) -> str:
    """:func:`plan_dict` as text (the default ``format=table``), with the source's tensor count,
    the output's size and every value's source; one line each, names escaped."""
    d = plan_dict(plan, problems=False)
    r = plan.resolved
    n_bytes = sum(m.nbytes for m in plan.outputs.values())
    lines = [
        f"source: {d['source']} ({len(plan.sources)} tensors)",
        f"adapter: {d['adapter']}   family: {d['family']}",
        f"output: {len(d['outputs'])} tensors, {n_bytes / 2**20:.1f} MiB, dtype {d['dtype']}, "
        f"max_draft_len {d['max_draft_len']}",
    ]
    lines += d["warnings"]
    if d["dropped"]:
        lines.append(f"dropped by rename: {len(d['dropped'])}")
    if d["ignored"]:
        lines.append(f"shared with target (ignored): {', '.join(d['ignored'])}")
    lines.append("layers:")
    for i, l in enumerate(d["layers"]):
        mask = "full" if l["window"] is None else f"window {l['window']}"
        low = ", ".join(f"{k}={v}" for k, v in l["lowering"].items())
        lines.append(f"  {i}: {'causal' if l['causal'] else 'non-causal'} {mask}  [{low}]")
    lines += defaults_lines(r)
    lines.append("values (source):")
    lines += ["  " + line for line in dump_sources(r).splitlines() if not line.startswith(("layers =", "norms ="))]
    lines.append("tensors (target <- source, transforms):")
    # layer ranges compressed as the loading report compresses them; an output no group makes is left out
    rows = [Problem(shown(o), "<-", shown(f"{', '.join(t['from'])} [{t['transforms']}]"))
            for o, t in d["outputs"].items() if t["transforms"]]
    lines += ["  " + row.replace(" | <- | ", " <- ", 1) for row in format_plan_rows(rows).splitlines()]
    return "\n".join(shown(line) for line in lines)  # names from the checkpoint: one line each, escaped


def problems_report(plan) -> str:
    """The loading report's problem rows, names escaped (:func:`~draftsmith.framework.shown.shown`)."""
    return format_plan_rows([Problem(shown(p.name), p.status, shown(p.detail)) for p in plan.problems])


def defaults_lines(r: ResolvedDrafter) -> list[str]:
    """The loading report's defaults block: every field that took a spec or family default."""
    rows = defaulted(r)
    return [f"defaults (not in config.json): {len(rows)}"] + ["  " + l for l in dump_sources(r, rows).splitlines()]


def defaults_json(r: ResolvedDrafter) -> list[dict]:
    """:func:`defaults_lines` as JSON-ready rows ``{field, value, source}``."""
    return [{"field": k, "value": v, "source": s} for k, v, s in defaulted(r)]


def _tensor_rows(plan) -> dict[str, tuple[list[str], str]]:
    """Output tensor -> (its source tensors, the transforms applied, or ``copy``)."""
    by_out = {}
    for g in plan.groups:
        ops = " + ".join(dict.fromkeys(a.transform.name for a in g.apps)) or "copy"
        for o in g.outputs:
            by_out[o] = (list(g.sources), ops)
    return by_out
