"""``supported-drafters.md`` and the README excerpt: one row per compiled adapter."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...adapters import ADAPTER_DIR
from ..compile.adapter import Adapter, load_adapter
from ..compile.converted_config import compile_config
from ..compile.resolved import ResolvedDrafter
from ..compile.trtllm_limits import trtllm_problems
from ..convert.synth import source_config
from ..emit.snippet import speculative_config
from ..spec.loading import adapter_files
from .markdown import (DEVICES, GUIDE_FILE, SCHEMA_FILE, SPEC_FILE, SUPPORTED_FILE, TRTLLM_STATUS, _banner, _code,
                       _table, _yaml, per_layer)

# --------------------------------------------------------------------------------------
# paths and adapters


def repo_root() -> Path:
    """The repository (or install) root: the parent of the shipped ``adapters/`` folder."""
    return Path(ADAPTER_DIR).parent


def default_docs_dir() -> Path:
    return repo_root() / "docs"


@dataclass
class Drafter:
    """One compiled adapter plus what the docs derive from it."""

    adapter: Adapter
    config: dict  # flattened full-size config
    resolved: ResolvedDrafter  # its record

    @property
    def spec(self):
        return self.adapter.spec

    @property
    def name(self) -> str:
        return self.adapter.name


def load_drafters(adapter_dir: str | Path | None = None) -> list[Drafter]:
    """Every adapter in ``adapters/`` (and in ``adapter_dir`` when given, which wins on a
    name clash), compiled, with its flattened full-size config; sorted by name."""
    files = adapter_files(adapter_dir)
    # the result is a pure function of the spec files' bytes: cache on them
    key = (None if adapter_dir is None else str(Path(adapter_dir).resolve()),
           tuple((n, str(p), hashlib.sha256(p.read_bytes()).hexdigest()) for n, p in sorted(files.items())))
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = _load(sorted(files), adapter_dir)
    return list(_CACHE[key])


_CACHE: dict[tuple, list[Drafter]] = {}


def _load(names: list[str], adapter_dir) -> list[Drafter]:
    out = []
    for name in names:
        a = load_adapter(name, adapter_dir=adapter_dir)
        out.append(Drafter(a, *compile_config(a, source_config(a, "full"), where=f"{a.path}: synth.config")))
    return out


# --------------------------------------------------------------------------------------
# supported-drafters.md


def norm_handling(adapter: Adapter) -> dict[str, str]:
    """Norm kind -> ``fold``, ``keep`` or ``as is`` (see ``Adapter.norm_modes``)."""
    return adapter.norm_modes()


def _norms_cell(adapter: Adapter) -> str:
    modes = norm_handling(adapter)
    label = {"fold": "fold `1 + w`", "keep": "keep `w` (Gemma)", "as is": "plain"}
    by: dict[str, list[str]] = {}
    for kind, mode in modes.items():
        by.setdefault(mode, []).append(kind)
    order = ["fold", "keep", "as is"]
    return "; ".join(f"{label[m]}: {', '.join(_code(k) for k in by[m])}" for m in order if m in by)


def _dequant_cell(d: Drafter) -> str:
    quants = sorted({(t.quant_method, t.name) for t in d.adapter.transforms if t.quant_method})
    if not quants:
        return "none (plain weights)"
    return ", ".join(f"{q} (`{op}`) -> {d.resolved.dims.dtype}" for q, op in quants)


def serving_config(d: Drafter) -> dict[str, Any]:
    """The ``speculative_config`` to serve ``d`` in TensorRT-LLM.

    ``decoding_type``: from ``docs.serving`` (else DSpark when the drafter has a Markov
    head, else DFlash); ``speculative_model``: ``docs.serving`` or ``<checkpoint>`` plus
    the drafter folder named in ``docs.example_checkpoint`` ("(the dspark/ folder)");
    ``max_draft_len``: from the flattened config, never from the spec's prose. The
    ``docs.serving`` keys pass the check ``emit`` makes (:func:`~..emit.snippet.speculative_config`):
    a snippet the docs show is one ``emit`` would write.
    """
    speculative_config(d.resolved, CONVERTED, dict(d.spec.docs.serving), where=str(d.adapter.path))
    serving = dict(d.spec.docs.serving)
    decoding = serving.pop("decoding_type", None)
    if decoding is None:
        decoding = "DSpark" if d.resolved.heads.markov_rank else "DFlash"
    serving.pop("speculative_model", None)  # the source to convert (source_folder), not what TensorRT-LLM reads
    serving.pop("max_draft_len", None)  # derived, below
    out = {"decoding_type": decoding, "speculative_model": CONVERTED,
           "max_draft_len": d.resolved.max_draft_len}
    out.update(dict(sorted(serving.items())))
    return out


#: what ``speculative_model`` names in the docs: the emitted package serves converted checkpoints only.
CONVERTED = "<converted>"


def source_folder(d: Drafter) -> str:
    """The drafter folder a user converts: ``docs.serving.speculative_model`` if the spec names
    it, else ``<checkpoint>`` plus the folder ``docs.example_checkpoint`` names ("(the dspark/ folder)")."""
    named = d.spec.docs.serving.get("speculative_model")
    if named:
        return str(named)
    m = re.search(r"\(the ([\w.-]+)/ folder\)", d.spec.docs.example_checkpoint)
    return f"<checkpoint>/{m.group(1)}" if m else "<checkpoint>"


def _footnotes(d: Drafter) -> list[str]:
    """The footnote texts of one adapter (each may span several lines)."""
    notes = list(d.spec.docs.notes)
    refused = trtllm_problems(d.resolved)
    if refused:
        notes.append(f"Serving in TensorRT-LLM: not yet; `draftsmith emit` refuses this drafter ({'; '.join(refused)}). "
                     "`draftsmith draft` and `draftsmith eval` run it on the reference host.")
        return notes + [f"Known limitation: {l}" for l in d.spec.docs.limitations]
    snippet = _yaml({"speculative_config": serving_config(d)}, flow=False)
    dc = d.config["dflash_config"]
    notes.append(
        f"Serving in TensorRT-LLM: `draftsmith convert adapter={d.name} source={source_folder(d)} out={CONVERTED}`, "
        f"`draftsmith emit adapter={d.name} config={CONVERTED} out=<plugins>`, then `trtllm-serve <target> "
        f"--custom_module_dirs <plugins>/<package>` with (`max_draft_len` {d.config['draftsmith']['max_draft_len']} "
        f"is derived from the converted config: block size {dc['block_size']}, `sample_from_anchor` "
        f"{str(d.config['dspark_config']['sample_from_anchor']).lower()}; docs/serving-on-trtllm.md):\n\n"
        + "\n".join(("    " + l) if l else "" for l in ["```yaml", *snippet.splitlines(), "```"])
    )
    notes += [f"Known limitation: {l}" for l in d.spec.docs.limitations]
    return notes


def _supported_rows(drafters: list[Drafter]) -> tuple[list[tuple[str, Drafter]], dict[str, list[int]], list[str]]:
    """(architecture, drafter) rows sorted by architecture; footnote numbers per adapter;
    the footnote texts in number order (numbered by first appearance in the table)."""
    rows = sorted(((arch, d) for d in drafters for arch in d.spec.match.architectures), key=lambda r: (r[0], r[1].name))
    numbers: dict[str, list[int]] = {}
    texts: list[str] = []
    for _, d in rows:
        if d.name in numbers:
            continue
        numbers[d.name] = []
        for t in _footnotes(d):
            texts.append(t)
            numbers[d.name].append(len(texts))
    return rows, numbers, texts


def supported_table(drafters: list[Drafter], footnotes: bool = True, limit: int | None = None,
                    first: str | None = None) -> list[str]:
    """The supported table's lines (the first ``limit`` rows); ``first``: an adapter whose rows
    lead, the others following in table order."""
    rows, numbers, _ = _supported_rows(drafters)
    rows = sorted(rows, key=lambda r: r[1].name != first)  # stable: table order otherwise
    shown = rows if limit is None else rows[:limit]
    out = []
    for arch, d in shown:
        marks = " ".join(f"[^{n}]" for n in numbers[d.name]) if footnotes else ""
        out.append([f"`{arch}`" + (f" {marks}" if marks else ""), d.spec.docs.model, d.spec.docs.example_checkpoint])
    return _table(["Architecture", "Model", "Example checkpoint"], out)


def _trtllm_cell(r: ResolvedDrafter) -> str:
    """The TensorRT-LLM path of a drafter: :data:`TRTLLM_STATUS`, or why ``emit`` refuses it."""
    problems = trtllm_problems(r)
    return f"not emitted: `draftsmith emit` refuses it ({'; '.join(problems)})" if problems else TRTLLM_STATUS


def feature_rows(d: Drafter) -> list[Any]:
    r = d.resolved
    window = per_layer([m.window for m in r.masks], lambda w: "full" if w is None else str(w))
    causal = per_layer([m.causal for m in r.masks], lambda c: "causal" if c else "non-causal")
    lowering = [per_layer([l.lowering[dev] for l in r.layers], _code) for dev, _ in DEVICES]
    limits = "; ".join(d.spec.docs.limitations) or "none known"
    return [
        _code(d.name), _code(d.spec.family),
        f"{r.block_size} / {r.max_draft_len}",
        window, causal, _dequant_cell(d), _norms_cell(d.adapter), *lowering, _trtllm_cell(r), limits,
    ]


def supported_drafters_md(drafters: list[Drafter]) -> str:
    rows, numbers, texts = _supported_rows(drafters)
    lines = [
        _banner("the adapter specs in `adapters/`"),
        "",
        "# Supported drafters",
        "",
        "Drafter checkpoints that draftsmith converts into the DFlash target layout "
        "([converted-format.md](converted-format.md)) and serves on TensorRT-LLM, one row per "
        "architecture that an adapter spec in `adapters/` matches. To add one, see "
        f"[{GUIDE_FILE}]({GUIDE_FILE}); every spec field is described in [{SPEC_FILE}]({SPEC_FILE}).",
        "",
        *supported_table(drafters),
        "",
        "## Feature matrix",
        "",
        "Derived from each compiled adapter and its flattened full-size config (`synth.config`): "
        "block size and `max_draft_len` from `dflash_config` and the family, windows and causality per "
        "layer as resolved by the attention table, dequantized formats from the weight transforms' "
        "`quant_method`, norm handling from the `norm_fold_gemma` transforms (fold: stored `1 + w` and run "
        "plainly; keep: stored `w` and run Gemma style), lowerings per device class.",
        "",
        *_table(
            ["Adapter", "Family", "Block size / `max_draft_len`", "Window", "Causality", "Dequant",
             "Norms", "Lowering SM100", "Lowering SM90", "Lowering CPU", "TensorRT-LLM path", "Known limitations"],
            [feature_rows(d) for d in drafters],
        ),
        "",
        "TensorRT-LLM path: TensorRT-LLM cannot be installed in this project's environment, so the plugin "
        "package (`draftsmith emit`) is checked by tests/upstream/trtllm against TensorRT-LLM's own source "
        "(verbatim excerpts executed, stand-ins transcribed from its source where no excerpt covers; "
        "docs/serving-on-trtllm.md says which); no row here has been served by TensorRT-LLM itself yet.",
        "",
    ]
    for n, text in enumerate(texts, 1):
        # continuation lines of a footnote are indented (spec notes may span lines)
        text = "\n".join(l if (i == 0 or not l or l.startswith("    ")) else "    " + l
                         for i, l in enumerate(text.strip().split("\n")))
        lines.append(f"[^{n}]: {text}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


#: the adapter the README introduces (MiniMax-M3.1-Flash's DSpark drafter): its row leads the excerpt
FLAGSHIP = "minimax_dspark"


def readme_table_excerpt(adapter_dir: str | Path | None = None, rows: int = 3,
                         drafters: list[Drafter] | None = None, prefix: str = "docs/") -> str:
    """The README's docs snippet: links, then ``rows`` rows of the supported table, the
    :data:`FLAGSHIP` adapter's first (footnote markers dropped: their definitions live in the
    full page)."""
    drafters = load_drafters(adapter_dir) if drafters is None else drafters
    all_rows, _, _ = _supported_rows(drafters)
    lines = [
        f"Docs: [supported drafters]({prefix}{SUPPORTED_FILE}) (table, feature matrix, serving snippets) · "
        f"[adapter spec reference]({prefix}{SPEC_FILE}) ([JSON Schema]({prefix}{SCHEMA_FILE})) · "
        f"[writing an adapter]({prefix}{GUIDE_FILE}) · [converted checkpoint format]({prefix}converted-format.md)",
        "",
        *supported_table(drafters, footnotes=False, limit=rows, first=FLAGSHIP),
    ]
    if len(all_rows) > rows:
        lines += ["", f"... and {len(all_rows) - rows} more in [supported drafters]({prefix}{SUPPORTED_FILE})."]
    return "\n".join(lines) + "\n"
