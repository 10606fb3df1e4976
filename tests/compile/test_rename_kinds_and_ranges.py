"""Rename kinds come from one closed registry that matches the schema's ``kind`` values;
layer ranges are written by one rule (report ``{0..2,5}``, docs ``layers 0-2, 5``)."""

import typing

import pytest

from draftsmith.framework.compile.rename import RENAME_KINDS, Renamer
from draftsmith.framework.convert.plan import compress_ranges
from draftsmith.framework.docs.markdown import per_layer
from draftsmith.framework.layer_ranges import format_ranges, runs
from draftsmith.framework.spec.schema import RenameRule


def test_registry_is_the_schema_kinds():
    assert set(RENAME_KINDS) == set(typing.get_args(RenameRule.model_fields["kind"].annotation))
    with pytest.raises(KeyError, match="unknown rename kind 'glob'; known: prefix, regex, template"):
        RENAME_KINDS.lookup("glob")


@pytest.mark.parametrize("rule,src,dst", [
    ({"kind": "prefix", "match": "model.", "to": ""}, "model.layers.3.x", "layers.3.x"),
    ({"kind": "template", "match": "m.layers.{i}.dec.{rest*}", "to": "layers.{i}.{rest*}"},
     "m.layers.12.dec.mlp.w", "layers.12.mlp.w"),
    ({"kind": "regex", "match": r"^blk\.(\d+)\.", "to": r"layers.\1.", "inverse_match": r"^layers\.(\d+)\.",
      "inverse_to": r"blk.\1."}, "blk.7.attn", "layers.7.attn"),
])
def test_each_kind_applies_and_inverts(rule, src, dst):
    r = Renamer([RenameRule.model_validate(rule), RenameRule(kind="prefix", match="drop.", to=None)])
    assert r.apply(src) == (0, dst) and r.inverse(dst) == src
    assert r.apply("drop.me") == (1, None) and r.apply("other") == (None, "other")


def test_ranges_one_rule():
    ix = [7, 0, 2, 1, 5, 2]
    assert runs(ix) == [(0, 2), (5, 5), (7, 7)]
    assert format_ranges(ix) == "0-2, 5, 7"
    assert compress_ranges(ix) == "{0..2,5,7}" and compress_ranges([4]) == "{4}"
    assert per_layer(["a", "a", "a", "b", "a"]) == "layers 0-2, 4: a; layer 3: b"
    assert per_layer(["x", "x"]) == "x (all 2 layers)"
