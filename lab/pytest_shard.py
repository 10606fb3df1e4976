"""A pytest plugin that keeps one shard of the collected tests, so that several pytest
processes share one GPU machine's cores (``lab/gpu_session.sh tp-shapes``): with
``PYTEST_SHARD=i/n`` (``0 <= i < n``) it keeps the ``i``-th of ``n`` contiguous runs of the
collected items (contiguous: the parameter cases of one test, which mostly compile the same
kernels, stay in one process). Unset: every test. Use: ``python -m pytest -p pytest_shard``
with ``lab/`` on ``PYTHONPATH``."""

import os

import pytest


def shard_of(count: int, spec: str) -> range:
    """The indices shard ``i/n`` keeps of ``count`` items: the ``i``-th of ``n`` runs of (nearly)
    equal length, in collection order; a bad spec raises ``ValueError``."""
    i, n = (int(x) for x in spec.split("/"))
    if not 0 <= i < n:
        raise ValueError(f"PYTEST_SHARD must be i/n with 0 <= i < n, got {spec}")
    return range(count * i // n, count * (i + 1) // n)


@pytest.hookimpl(trylast=True)  # after -m / -k deselection: shards of the tests that run
def pytest_collection_modifyitems(config, items):
    spec = os.environ.get("PYTEST_SHARD")
    if not spec:
        return
    keep = shard_of(len(items), spec)
    dropped = [it for k, it in enumerate(items) if k not in keep]
    items[:] = [it for k, it in enumerate(items) if k in keep]
    config.hook.pytest_deselected(items=dropped)
