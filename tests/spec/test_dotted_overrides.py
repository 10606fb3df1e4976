"""Overrides of keys whose names hold dots (``config.fields``, ``synth.tiny`` are keyed by dotted
config keys), on the command line (Hydra cannot address them: the library applies them) and in
the library's ``load_adapter(overrides=...)``: as spelled where one existing key matches, or in
brackets (which also add a key); ambiguity, typos and unbalanced brackets are one line, exit 2."""

from __future__ import annotations

import json

import pytest
import yaml

from draftsmith.framework.cli.compose import compose
from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import compile_spec, load_adapter
from draftsmith.framework.compile.resolve import resolve
from draftsmith.framework.errors import UserError
from support.helpers import one_error

ORDER = "config.fields.dflash_config.selector_unary_order.default"


@pytest.fixture(scope="module")
def zlab(tmp_path_factory):
    d = tmp_path_factory.mktemp("zlab2")
    assert main(["synth", "adapter=zlab_dflash2", "scale=tiny", f"out={d / 'S'}", "seed=5"]) == 0
    return d / "S", json.loads((d / "S" / "config.json").read_text())


def record_from_cli(args: list[str], raw: dict):
    opts, spec, path = compose("inspect", ["adapter=zlab_dflash2", "source=unused", *args])
    return resolve(compile_spec(spec, path, opts["adapter_overrides"]), raw)


@pytest.mark.parametrize("spelling", [f"adapter.{ORDER}=cap_then_scale",
                                      "adapter.config.fields[dflash_config.selector_unary_order].default=cap_then_scale"])
def test_cli_override_reaches_a_dotted_field_key(zlab, spelling):
    _, raw = zlab
    assert record_from_cli([], raw).dflash2.selector.unary.order == "scale_then_cap"  # the spec default
    assert record_from_cli([spelling], raw).dflash2.selector.unary.order == "cap_then_scale"


def test_dotted_and_plain_overrides_compose_together(zlab):
    _, raw = zlab
    r = record_from_cli([f"adapter.{ORDER}=cap_then_scale", "adapter.attention.full_causal=true",
                         "adapter.config.fields.dflash_config.output_multiplier.default=0.5"],
                        {k: v for k, v in raw.items() if k != "dflash_config"} |
                        {"dflash_config": {k: v for k, v in raw["dflash_config"].items() if k != "output_multiplier"}})
    assert r.dflash2.selector.unary.order == "cap_then_scale" and r.dflash2.selector.unary.multiplier == 0.5


def test_bracketed_key_adds_a_field(zlab, capsys):
    src, _ = zlab
    assert main(["inspect", "adapter=zlab_dflash2", f"source={src}",
                 "+adapter.config.fields[dflash_config.extra_knob]={default: 7}"]) == 0
    assert "config.dflash_config.extra_knob = 7" in capsys.readouterr().out
    # without brackets, a key that is not there yet cannot be told from a nested one: refused, one line
    assert main(["inspect", "adapter=zlab_dflash2", f"source={src}",
                 "adapter.config.fields.dflash_config.extra_knob.default=7"]) == 2
    line = one_error(capsys)
    assert "adapter.config.fields.dflash_config.extra_knob.default=7" in line and "no such key" in line


def test_library_overrides_take_the_same_spellings(zlab):
    _, raw = zlab
    for o in (f"{ORDER}=cap_then_scale", "config.fields[dflash_config.selector_unary_order].default=cap_then_scale",
              f"adapter.{ORDER}=cap_then_scale"):
        assert resolve(load_adapter("zlab_dflash2", [o]), raw).dflash2.selector.unary.order == "cap_then_scale"
    tiny = load_adapter("zlab_dflash2", ["synth.tiny.dflash_config.selector_top_k=3"]).spec.synth.tiny
    assert tiny["dflash_config.selector_top_k"] == 3


@pytest.mark.parametrize("override,want", [
    ("adapter.config.fields.dflash_config.selector_unary_ordr.default=x",
     "did you mean 'dflash_config.selector_unary_order'?"),
    (f"adapter.{ORDER.replace('default', 'defalt')}=x", "did you mean 'default'?"),
    ("adapter.config.fields[dflash_config.block_size.default=1", "unbalanced brackets"),
])
def test_mistakes_are_one_line(zlab, capsys, tmp_path, override, want):
    src, _ = zlab
    assert main(["convert", "adapter=zlab_dflash2", f"source={src}", f"out={tmp_path / 'T'}", override]) == 2
    line = one_error(capsys)
    assert line.startswith(f"error: command line: {override}") and want in line, line
    assert not (tmp_path / "T").exists()


def test_two_spellings_that_both_exist_are_refused(zlab, capsys, tmp_path):
    src, _ = zlab
    spec = yaml.safe_load((load_adapter("zlab_dflash2").path).read_text())
    spec["config"]["irrelevant"].update({"note": "a key", "note.more": "a dotted key"})
    (tmp_path / "zlab_dflash2.yaml").write_text(yaml.safe_dump(spec))
    assert main(["inspect", "adapter=zlab_dflash2", f"adapter_dir={tmp_path}", f"source={src}",
                 "adapter.config.irrelevant.note.more=x"]) == 2
    line = one_error(capsys)
    assert "'note' or 'note.more' are both keys here" in line and "[note.more]" in line, line
    assert main(["inspect", "adapter=zlab_dflash2", f"adapter_dir={tmp_path}", f"source={src}",
                 "adapter.config.irrelevant[note.more]=x"]) == 0
    capsys.readouterr()
    with pytest.raises(UserError, match="both keys here"):
        load_adapter("zlab_dflash2", ["config.irrelevant.note.more=x"], adapter_dir=tmp_path)


def test_one_walk_into_nested_data():
    """``reach`` is the one walk (dotted keys, override keys): the value when every step exists,
    else where the walk stopped; ``get_dotted`` reads through it and never indexes a list."""
    from draftsmith.framework.compile.dotted import get_dotted
    from draftsmith.framework.spec.overrides import reach

    data = {"a": {"b": [10, {"c": None}], "d.e": 3}}
    assert reach(data, ["a", "b", 1, "c"]) == (None, 4)
    assert reach(data, ["a", "b", 0]) == (10, 3)
    assert reach(data, ["a", "x", "y"]) == (data["a"], 1)
    assert reach(data, ["a", "b", 2]) == (data["a"]["b"], 2)
    assert get_dotted(data, "a.b") == [10, {"c": None}]
    assert get_dotted(data, "a.b.0", "absent") == "absent" and get_dotted(data, "a.x", 7) == 7
    assert get_dotted({"a": {"c": None}}, "a.c", 7) is None
