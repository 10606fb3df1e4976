"""``draftsmith inspect``: the conversion plan and loading report, no tensor data read
(exit 1 when the checkpoint is incomplete)."""

from __future__ import annotations

import json

from ...convert.plan import plan as conversion_plan
from ...io.gc_pause import paused_gc
from ..inputs import adapter as chosen_adapter, source as chosen_source
from ...convert.report import describe_plan, plan_dict, problems_report


def run(opts, spec, path) -> int:
    source = chosen_source(opts, spec)
    adapter = chosen_adapter(spec, path, opts, source)
    with paused_gc():  # one bulk step: no cyclic GC passes over the plan's 10^5-10^6 objects
        plan = conversion_plan(adapter, source)
        if opts["format"] == "json":
            print(json.dumps(plan_dict(plan)))
            return 0 if plan.complete else 1
        print(describe_plan(plan))
        if not plan.complete:
            print(f"\nloading report: {len(plan.problems)} problem(s)")
            print(problems_report(plan))
        complete = plan.complete
        del plan  # freed by reference counting: the collection that GC resumes with stays small
    if not complete:
        return 1
    print("\nloading report: complete (every target tensor accounted for)")
    return 0
