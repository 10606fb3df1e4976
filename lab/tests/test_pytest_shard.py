"""The shards of ``lab/pytest_shard.py`` cover every test exactly once, in order."""

import pytest

from pytest_shard import shard_of


@pytest.mark.parametrize("count", [0, 1, 5, 170, 171])
@pytest.mark.parametrize("n", [1, 3, 6])
def test_shards_partition_the_items(count, n):
    got = [k for i in range(n) for k in shard_of(count, f"{i}/{n}")]
    assert got == list(range(count))
    sizes = [len(shard_of(count, f"{i}/{n}")) for i in range(n)]
    assert max(sizes) - min(sizes) <= 1


def test_bad_spec_refused():
    with pytest.raises(ValueError):
        shard_of(5, "3/3")
