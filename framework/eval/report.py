"""What ``draftsmith eval`` reports: acceptance length, acceptance by position, speed.

Definitions (``K`` = max_draft_len, a *step* = one draft + one verification):

- acceptance length of a step: accepted drafts + 1 (the target's bonus token);
  ``mean_acceptance_length`` averages it over every step of every prompt;
- ``acceptance_by_position[k]``: the fraction of steps whose draft ``k+1`` was accepted
  (so drafts ``1..k+1`` all were); ``mean_acceptance_length == 1 + sum(acceptance_by_position)``;
- ``tokens_per_second``: generated tokens over the wall time of the loops (prefill
  included), summed over prompts.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import UserError
from ..io.atomic_file import head_has, write_file


@dataclass
class PromptResult:
    """One prompt: ``tokens`` generated, ``accepted`` drafts per step, loop time in seconds;
    ``match`` (with ``check``): whether the target alone produced the same tokens."""

    prompt_tokens: int
    tokens: list[int]
    accepted: list[int]
    seconds: float
    text: str = ""
    match: Optional[bool] = None
    baseline_seconds: Optional[float] = None


@dataclass
class EvalReport:
    target: str
    checkpoint: str
    device: str
    target_dtype: str
    drafter_dtype: str
    max_new_tokens: int
    block_size: int
    max_draft_len: int
    layers: list[dict] = field(default_factory=list)
    selector: Optional[bool] = None  # DFlash 2: whether the candidate selector drafted; None: no selector
    prompts: list[PromptResult] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return sum(len(p.accepted) for p in self.prompts)

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + sum(sum(p.accepted) for p in self.prompts) / max(1, self.steps)

    @property
    def acceptance_by_position(self) -> list[float]:
        n = max(1, self.steps)
        return [sum(a > k for p in self.prompts for a in p.accepted) / n for k in range(self.max_draft_len)]

    @property
    def generated_tokens(self) -> int:
        return sum(len(p.tokens) for p in self.prompts)

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / max(1e-12, sum(p.seconds for p in self.prompts))

    @property
    def baseline_tokens_per_second(self) -> Optional[float]:
        if any(p.baseline_seconds is None for p in self.prompts):
            return None
        return self.generated_tokens / max(1e-12, sum(p.baseline_seconds for p in self.prompts))

    @property
    def matches(self) -> Optional[bool]:
        """``True`` when every prompt matched the target alone (``None`` without ``check``)."""
        if any(p.match is None for p in self.prompts):
            return None
        return all(p.match for p in self.prompts)


def report_dict(r: EvalReport) -> dict:
    """The report as one JSON-serialisable object."""
    return {
        "target": r.target, "checkpoint": r.checkpoint, "device": r.device, "target_dtype": r.target_dtype,
        "drafter_dtype": r.drafter_dtype, "max_new_tokens": r.max_new_tokens, "block_size": r.block_size,
        "max_draft_len": r.max_draft_len, "selector": r.selector, "layers": r.layers, "prompts": len(r.prompts),
        "steps": r.steps,
        "mean_acceptance_length": round(r.mean_acceptance_length, 4),
        "acceptance_by_position": [round(x, 4) for x in r.acceptance_by_position],
        "generated_tokens": r.generated_tokens, "tokens_per_second": round(r.tokens_per_second, 2),
        "baseline_tokens_per_second": None if r.baseline_tokens_per_second is None
        else round(r.baseline_tokens_per_second, 2),
        "matches_target": r.matches,
        "per_prompt": [{"prompt_tokens": p.prompt_tokens, "generated_tokens": len(p.tokens), "steps": len(p.accepted),
                        "mean_acceptance_length": round(1 + sum(p.accepted) / max(1, len(p.accepted)), 4),
                        "match": p.match, "tokens": p.tokens, "text": p.text} for p in r.prompts],
    }


def report_json(r: EvalReport) -> str:
    return json.dumps(report_dict(r))


def format_report(r: EvalReport) -> str:
    """A short human-readable summary."""
    lines = [f"eval  {r.checkpoint}  against  {r.target}",
             f"device {r.device}  target {r.target_dtype}  drafter {r.drafter_dtype}  "
             f"B {r.block_size}  K {r.max_draft_len}  max_new_tokens {r.max_new_tokens}"
             + ("" if r.selector is None else f"  candidate selector {'on' if r.selector else 'off'}"), ""]
    for i, l in enumerate(r.layers):
        mask = ("full" if l["window"] is None else f"window {l['window']}") + (", causal" if l["causal"] else ", non-causal")
        lines.append(f"layer {i}: {mask}  rope_theta {l['rope_theta']:g}  lowering {l['lowering']}")
    lines += ["", f"prompts {len(r.prompts)}  steps {r.steps}  generated {r.generated_tokens} tokens",
              f"mean acceptance length  {r.mean_acceptance_length:.3f}  (of at most {r.max_draft_len + 1})",
              "acceptance by position  " + "  ".join(f"{k + 1}:{x:.3f}" for k, x in enumerate(r.acceptance_by_position)),
              f"tokens/s  {r.tokens_per_second:.1f}"]
    if r.baseline_tokens_per_second is not None:
        lines.append(f"target alone  {r.baseline_tokens_per_second:.1f} tokens/s   "
                     f"output {'identical' if r.matches else 'DIFFERS'} on "
                     f"{sum(bool(p.match) for p in r.prompts)}/{len(r.prompts)} prompts")
    return "\n".join(lines)


def require_matplotlib(path: str | Path):
    """``matplotlib`` (Agg backend), or a one-line :class:`UserError` for ``plot=path``."""
    try:
        import matplotlib
    except ImportError:
        raise UserError(f"plot={path}: needs matplotlib (pip install matplotlib)") from None
    if not str(path).lower().endswith(".png"):
        raise UserError(f"plot={path}: expected a .png file name")
    matplotlib.use("Agg")
    return matplotlib


def plot_acceptance(r: EvalReport, path: str | Path, overwrite: bool = False) -> None:
    """Bar chart of ``acceptance_by_position`` into ``path`` (PNG; needs matplotlib), written
    atomically; an existing ``path`` is replaced only with ``overwrite`` and only when
    ``eval`` wrote it (:func:`plot_owned`)."""
    require_matplotlib(path)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    k = list(range(1, r.max_draft_len + 1))
    ax.bar(k, r.acceptance_by_position, color="#4878a8")
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted (fraction of steps)")
    ax.set_ylim(0, 1)
    ax.set_xticks(k)
    ax.set_title(f"mean acceptance length {r.mean_acceptance_length:.2f}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": PLOT_SOFTWARE})
    plt.close(fig)
    write_file(path, buf.getvalue(), key="plot", command="eval", overwrite=overwrite, owned=plot_owned)


#: the PNG ``Software`` text chunk of a plot ``eval`` wrote: what ``overwrite=true`` may replace
PLOT_SOFTWARE = "draftsmith eval"


def plot_owned(path: Path) -> bool:
    """``path`` is a PNG ``eval`` wrote (its ``Software`` chunk, in the first 4 KiB)."""
    return head_has(path, b"Software\x00" + PLOT_SOFTWARE.encode())
