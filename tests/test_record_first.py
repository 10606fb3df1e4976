"""Compilation is record-first: the record compile hands in-process consumers is the one
the converted config carries, and only readers of a config on disk re-parse it."""

import pytest

from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.convert.synth import source_config
from draftsmith.framework.compile.engine import load_adapter
from draftsmith.framework.spec.loading import adapter_files


@pytest.mark.parametrize("name", sorted(adapter_files()))
def test_compiled_record_is_the_one_the_config_carries(name):
    a = load_adapter(name)
    flat, record = a.compile_config(source_config(a, "tiny"))
    assert record == ResolvedDrafter.from_config(flat)
    assert flat["draftsmith"] == record.section()

