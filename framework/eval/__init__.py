"""``draftsmith eval``: greedy speculative decoding of a converted drafter against its target.

:func:`run_eval` (:mod:`.loop`) drives a Hugging Face causal LM (:mod:`.target`) and the
reference drafter (:mod:`.drafter`, the one module that touches the host API) over the
prompts of a text or JSONL file (:mod:`.prompts`) and returns an :class:`EvalReport`
(:mod:`.report`: mean acceptance length, acceptance per draft position, tokens per second).
"""

from .loop import run_eval
from .report import EvalReport

__all__ = ["EvalReport", "run_eval"]
