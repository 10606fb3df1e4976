"""Session-wide fixtures: one synthetic and one converted checkpoint per shipped adapter.

``checkpoints(name)`` synthesizes adapter ``name`` at scale ``tiny`` (seed
:data:`SEED`, keeping synth's target-layout weights), checks its plan is complete,
converts it, and caches the result for the whole session. The folders are shared: a
test that alters a checkpoint copies it first (``shutil.copytree``).

Under pytest-xdist the scheduling unit is a file, and the TensorRT-LLM suite as a whole
(:func:`pytest_xdist_make_scheduler`), which is collected first (:func:`pytest_collection_modifyitems`).

Bytecode is written and read (``__pycache__``) whatever ``PYTHONDONTWRITEBYTECODE`` says: the suite
starts hundreds of Python processes (drivers, CLI runs, workers, interpreter children), each of which
would otherwise compile the product again, and pytest's rewritten test modules are cached the same way;
a deployment imports the emitted package with bytecode on, as these processes now do.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.execute import execute
from draftsmith.framework.convert.plan import plan as conversion_plan
from draftsmith.framework.convert.synth import SynthResult, synthesize

SEED = 7

sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@dataclass(frozen=True)
class Checkpoints:
    """One adapter's session checkpoints (read-only for tests)."""

    name: str
    adapter: object  # the compiled adapter (engine.load_adapter)
    synth: SynthResult  # .path: the source-format folder (with target/), .config, .targets
    converted: Path  # the converted (target-layout) folder

    @property
    def source(self) -> Path:
        return self.synth.path

    @property
    def target(self) -> Path:
        """The fake target synth wrote beside the drafter (embed_tokens, lm_head)."""
        return self.synth.path / "target"


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    cache: dict[str, Checkpoints] = {}

    def get(name: str) -> Checkpoints:
        if name not in cache:
            adapter = load_adapter(name)
            root = tmp_path_factory.mktemp(f"ckpt-{name}")
            res = synthesize(adapter, "tiny", root / "source", seed=SEED, keep_targets=True)
            plan = conversion_plan(adapter, res.path)
            assert plan.complete, plan.report()
            cache[name] = Checkpoints(name, adapter, res, execute(plan, root / "converted", progress=False))
        return cache[name]

    return get


#: node-id prefix of the TensorRT-LLM suite: one scheduling unit under pytest-xdist
TRTLLM_SUITE = "tests/upstream/trtllm/"


def pytest_collection_modifyitems(session, config, items):
    """The TensorRT-LLM suite first (a stable sort; the rest keep their order): it is the longest
    scheduling unit, and collected last it ran alone on one worker at the end of an ``-n 2`` run."""
    items.sort(key=lambda item: not item.nodeid.startswith(TRTLLM_SUITE))


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``-n 2``, the README's command): each file's tests on one worker (module
    fixtures and a module's Triton-interpreter child run once), and the TensorRT-LLM suite on one
    worker as a whole (its per-adapter cases, drives and process pools are built once a session)."""
    from xdist.scheduler import LoadFileScheduling

    class FileOrSuiteScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return TRTLLM_SUITE if nodeid.startswith(TRTLLM_SUITE) else super()._split_scope(nodeid)

    return FileOrSuiteScheduling(config, log)
