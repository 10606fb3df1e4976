"""The plan: everything known from ``config.json`` and safetensors headers, before any
tensor data is read: renames, transform applications, output names/shapes/dtypes, and
the loading report (missing, unexpected, mis-shaped tensors)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...transforms.base import Binding, Context, TensorMeta, Transform, TransformError

from ..compile.converted_config import compile_config
from .checkpoint import SourceTensor, read_config, read_headers
from ..errors import UserError
from ..io.gc_pause import paused_gc
from ..layer_ranges import format_ranges

if TYPE_CHECKING:
    from ..compile.adapter import Adapter
    from ..compile.resolved import ResolvedDrafter


@dataclass(frozen=True)
class Application:
    """One transform applied to one binding, at one stage."""

    stage: int
    transform: Transform
    binding: Binding
    sources: frozenset[str]  # the source tensors this application's inputs derive from


@dataclass
class Node:
    meta: TensorMeta
    sources: frozenset[str]


@dataclass(frozen=True)
class Problem:
    name: str
    status: str  # MISSING | UNEXPECTED | MISMATCH | INVALID | UNMATCHED (a spec rule)
    detail: str = ""


@dataclass
class Group:
    """Tensors converted together: the sources one output needs (peak memory unit)."""

    sources: list[str]
    apps: list[Application]
    outputs: list[str]
    nbytes: int


#: problems listed one per line by ``convert`` before the rest are counted
MAX_PROBLEM_LINES = 200


@dataclass
class Plan:
    source: Path | None
    config: dict
    sources: dict[str, SourceTensor]
    renamed: dict[str, str]  # source name -> renamed name
    dropped: list[str]
    ignored: list[str]  # shared with target
    outputs: dict[str, TensorMeta]  # target layout, in output order
    groups: list[Group]
    problems: list[Problem] = field(default_factory=list)
    max_shard_bytes: int = 5 * 2**30
    resolved: ResolvedDrafter | None = None  # the record ``config`` carries (None: a bare in-memory plan)

    @property
    def complete(self) -> bool:
        return not self.problems

    def report(self) -> str:
        return format_report(self.problems)

    def problem_lines(self, limit: int = MAX_PROBLEM_LINES) -> list[str]:
        """One line per problem, each led by the file(s) holding the tensors involved
        (the checkpoint folder for a tensor that no file holds); past ``limit`` problems one
        closing line counts the rest by status. Linear in tensor count: names are looked up
        by the whole tokens of a problem's text, never by scanning."""
        shown = [(p, set(_TOKEN.findall(f"{p.name} {p.detail}"))) for p in self.problems[:limit]]
        wanted = set().union(*(tokens for _, tokens in shown))
        by_new: dict[str, list[str]] = {}  # renamed name -> source names, for the shown tokens only
        for s, r in self.renamed.items():
            if r in wanted:
                by_new.setdefault(r, []).append(s)
        out = []
        for p, tokens in shown:
            srcs = sorted({s for t in tokens for s in by_new.get(t, ())}) or sorted(
                t for t in tokens if t in self.sources)
            files = sorted({str(self.sources[s].file) for s in srcs})
            where = ", ".join(files) if files else str(self.source)
            named = [s for s in srcs if s not in tokens]
            out.append(f"{where}: {p.name} | {p.status}" + (f" | {p.detail}" if p.detail else "")
                       + (f" (source {', '.join(named)})" if named else ""))
        rest = self.problems[limit:]
        if rest:
            counts: dict[str, int] = {}
            for p in rest:
                counts[p.status] = counts.get(p.status, 0) + 1
            out.append(f"{self.source}: ... and {len(rest)} more problems ("
                       + ", ".join(f"{n} {k}" for k, n in counts.items()) + "); `draftsmith inspect` lists them all")
        return out


#: a tensor-name-like token of a problem's text (names hold no spaces, punctuation or brackets)
_TOKEN = re.compile(r"[^\s,;:()\[\]'\"]+")


def _layer_key(name: str) -> tuple[str, int | None]:
    m = re.match(r"^(.*?\blayers\.)(\d+)(\..*)$", name)
    return (m.group(1) + "{}" + m.group(3), int(m.group(2))) if m else (name, None)


def compress_ranges(ix: list[int]) -> str:
    """``{0..4,7}``: the report's spelling of :func:`layer_ranges.format_ranges`."""
    return "{" + format_ranges(ix, sep=",", dash="..") + "}"


def format_report(problems: list[Problem]) -> str:
    """transformers-style lines, layer ranges compressed: ``layers.{0..4}.x | MISSING``."""
    groups: dict[tuple, list[int | None]] = {}
    for p in problems:
        key, i = _layer_key(p.name)
        detail = p.detail.replace(f"layers.{i}.", "layers.{}.") if i is not None else p.detail
        groups.setdefault((key, p.status, detail), []).append(i)
    lines = []
    for (key, status, detail), ix in groups.items():
        name = key.replace("{}", compress_ranges(ix)) if ix[0] is not None else key
        det = detail.replace("{}", compress_ranges(ix)) if ix[0] is not None else detail
        lines.append(f"{name} | {status}" + (f" | {det}" if det else ""))
    return "\n".join(lines)


def plan(adapter: Adapter, source: Path) -> Plan:
    """The conversion plan of checkpoint folder ``source`` (reads config.json and the
    safetensors headers only)."""
    source = Path(source)
    cfg, resolved = compile_config(adapter, read_config(source), where=str(source / "config.json"))
    try:
        Context(cfg).dtype
    except ValueError as e:
        raise UserError(f"{source / 'config.json'}: torch_dtype: {e}") from None
    with paused_gc():  # hundreds of thousands of live objects for a big header
        sources = read_headers(source)
        return plan_from_metas(adapter, cfg, sources, source, resolved)


def plan_from_metas(adapter: Adapter, cfg: dict, sources: dict[str, SourceTensor], source: Path | None,
                    resolved: ResolvedDrafter | None = None) -> Plan:
    ctx = Context(cfg)
    problems: list[Problem] = []
    shared = set(adapter.spec.weights.shared_with_target)

    # stage 0: rename
    nodes: dict[str, Node] = {}
    renamed, dropped, ignored = {}, [], []
    used_renames: set[int] = set()
    for name in sorted(sources):
        rule, new = adapter.renamer.apply(name)
        if rule is not None:
            used_renames.add(rule)
        if new is None:
            dropped.append(name)
            continue
        if new in shared:
            ignored.append(name)
            continue
        if new in nodes:
            other = next(iter(nodes[new].sources))
            problems.append(Problem(new, "INVALID", f"both {other} and {name} rename to it"))
            continue
        renamed[name] = new
        nodes[new] = Node(sources[name].meta, frozenset([name]))

    # transform stages
    problems += unmatched_rules(adapter, "rename", used_renames, sorted(sources))
    apps: list[Application] = []
    for stage, t in enumerate(adapter.transforms, start=1):
        names = set(nodes)
        consumed: set[str] = set()
        new_nodes: dict[str, Node] = {}
        bound = False
        for name in sorted(names):
            if name in consumed:
                continue
            b = t.bind(name, names)
            if b is None:
                continue
            bound = True
            missing = [n for n in b.inputs.values() if n not in nodes]
            if missing:
                for n in missing:
                    problems.append(Problem(n, "MISSING", f"source {_source_name(adapter, n)}, needed by {t.name} for {b.outputs[0]}"))
                consumed.update(n for n in b.inputs.values() if n in nodes)
                continue
            taken = [n for n in b.inputs.values() if n in consumed]
            if taken:
                problems.append(Problem(taken[0], "INVALID", f"used by two {t.name} applications"))
                continue
            try:
                out = t.meta(b, {r: nodes[n].meta for r, n in b.inputs.items()}, ctx)
            except TransformError as e:
                problems.append(Problem(b.outputs[0], "INVALID", str(e)))
                consumed.update(b.inputs.values())
                continue
            ins = tuple(b.inputs.values())
            srcs = nodes[ins[0]].sources if len(ins) == 1 else frozenset().union(*(nodes[n].sources for n in ins))
            consumed.update(b.inputs.values())
            for o, m in out.items():
                new_nodes[o] = Node(m, srcs)
            apps.append(Application(stage, t, b, srcs))
        if not bound:
            problems += unmatched_rules(adapter, "transforms", set(), sorted(names), only=stage - 1)
        for n in consumed:
            nodes.pop(n, None)
        clash = set(new_nodes) & set(nodes)
        for n in sorted(clash):
            problems.append(Problem(n, "INVALID", f"{t.name} produces a name that already exists"))
        nodes.update(new_nodes)

    # compare with the target layout
    layout = adapter.family.target_layout(cfg)
    mentioned = {p.name for p in problems} | {t for p in problems for t in _TOKEN.findall(p.detail)}
    for name, want in layout.items():
        if name not in nodes:
            if name in mentioned:
                continue
            src = _source_name(adapter, name)
            detail = f"expected source {src}" if src != name else ""
            problems.append(Problem(name, "MISSING", detail))
        elif nodes[name].meta != want:
            problems.append(Problem(name, "MISMATCH", f"converts to {nodes[name].meta}, target layout wants {want}"))
    for name in sorted(set(nodes) - set(layout)):
        srcs = sorted(nodes[name].sources)
        detail = f"from {srcs[0]}" if srcs and srcs[0] != name else ""
        problems.append(Problem(name, "UNEXPECTED", detail))

    # groups: sources that convert together (connected through applications)
    groups: list[Group] = []
    by_sources: dict[frozenset, list[str]] = {}
    for name in layout:
        if name in nodes:
            by_sources.setdefault(nodes[name].sources, []).append(name)
    apps_by_source: dict[str, list[Application]] = {}  # each app under one of its sources
    order = {id(a): i for i, a in enumerate(apps)}
    for a in apps:
        apps_by_source.setdefault(min(a.sources), []).append(a)
    for srcs, outs in by_sources.items():
        members = sorted(srcs)
        g_apps = [a for s in members for a in apps_by_source.get(s, ()) if a.sources <= srcs]
        if len(g_apps) > 1:
            g_apps.sort(key=lambda a: order[id(a)])
        groups.append(Group(members, g_apps, outs, sum(sources[s].meta.nbytes for s in members)))
    return Plan(source, cfg, sources, renamed, dropped, ignored, layout, groups, problems,
                adapter.spec.weights.max_shard_bytes, resolved)



def unmatched_rules(adapter: Adapter, kind: str, used: set[int], names: list[str], only: int | None = None) -> list[Problem]:
    """A Problem for each non-optional ``weights.<kind>`` rule (or rule ``only``) not in ``used``,
    named by its spec location and with the closest of ``names`` (the tensors it was tried on)."""
    rules = adapter.spec.weights.rename if kind == "rename" else adapter.spec.weights.transforms
    out = []
    for i, rule in enumerate(rules):
        if (only is not None and i != only) or i in used or rule.optional:
            continue
        pattern = rule.match
        close = difflib.get_close_matches(pattern, _distinct_shapes(names), n=2, cutoff=0.0) if names else []
        label = f"{kind} rule {rule.op if kind == 'transforms' else rule.kind} {pattern!r}"
        detail = (f"{adapter.rule_location(kind, i)}: {label} matches no tensor"
                  + (f" (closest: {', '.join(close)})" if close else "")
                  + "; fix it, or mark it optional: true")
        out.append(Problem(f"weights.{kind}[{i}]", "UNMATCHED", detail))
    return out


def _distinct_shapes(names: list[str], limit: int = 2000) -> list[str]:
    """At most ``limit`` names, one per layer-independent shape (``layers.N.x`` counted once),
    so that did-you-mean suggestions stay bounded for 100 000-tensor checkpoints."""
    seen: dict[str, str] = {}
    for n in names:
        key = _layer_key(n)[0]
        if key not in seen:
            seen[key] = n
            if len(seen) >= limit:
                break
    return list(seen.values())


def _source_name(adapter: Adapter, name: str) -> str:
    """The source spelling of a renamed ``name`` (for messages), or ``name`` itself."""
    try:
        return adapter.renamer.inverse(name)
    except ValueError:
        return name
