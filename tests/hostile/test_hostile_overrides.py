"""Overrides are data, checked as data (issue 46 point 2, issue 47 points 4 and 7).

Every refused override is one line that names the argument and what is wrong with it (never
Hydra's ``Error merging override``, never a traceback); bounds are tested just under and just
over. Most cases are refused before Hydra runs (milliseconds); the accepted ones compose.
"""

from __future__ import annotations

import contextlib
import io
import time

import pytest

from draftsmith.framework.cli.compose import compose
from draftsmith.framework.cli.main import main
from draftsmith.framework.errors import UserError
from draftsmith.framework.spec.loading import load_spec
from draftsmith.framework.spec.override_args import MAX_DIGITS, MAX_INT, MAX_KEY_CHARS, MAX_VALUE_CHARS
from support.reliability_log import record

AREA = "overrides"


def refused(arg: str, command: str = "convert") -> str:
    """The one line ``arg`` is refused with (it must name the argument, or its head)."""
    with pytest.raises(UserError) as e:
        compose(command, ["adapter=minimax_dspark", arg])
    problems = e.value.problems
    assert len(problems) == 1, problems
    line = problems[0]
    assert "\n" not in line and line.startswith(f"command line: {arg[:100]}"), line
    assert "Error merging override" not in line and "Traceback" not in line, line
    return line


def accepted(*args: str, command: str = "convert"):
    return compose(command, ["adapter=minimax_dspark", *args])[1]


INJECTIONS = [
    ("dotted key, + addition", "+adapter.docs.serving._target_=os.system", "_target_"),
    ("a value that is a mapping", "+adapter.docs.serving.x={_target_: os.system}", "_target_"),
    ("a list item that is a mapping", "+adapter.docs.serving.x=[{_partial_: true}]", "_partial_"),
    ("a list item", "adapter.docs.notes=[a, _args_]", "_args_"),
    ("a bracketed dotted key's value", "+adapter.config.fields[a.b]={default: {_recursive_: true}}", "_recursive_"),
    ("a bracketed key", "+adapter.synth.tiny[_convert_]=all", "_convert_"),
    ("an appended list item", "+adapter.weights.rename.3={kind: prefix, match: a, to: b, _target_: x}", "_target_"),
    ("a key into the converted config.json", "+adapter.config.fields[_target_]={default: os.system}", "_target_"),
    ("interpolation inside a mapping", "+adapter.docs.serving.x={k: '${oc.env:HOME}'}", "${"),
]


@pytest.mark.parametrize("label,arg,key", INJECTIONS, ids=[i[0] for i in INJECTIONS])
def test_instantiation_and_interpolation_keys_refused_everywhere(label, arg, key):
    line = refused(arg)
    assert key in line, line
    record(AREA, f"instantiation/interpolation key in an override ({label})", "exit 2, one line naming the argument")


def test_target_never_reaches_the_converted_config(tmp_path):
    """``+adapter.config.fields[_target_]={default: os.system}`` once wrote ``_target_`` into the
    converted config.json (exit 0); now: exit 2, nothing written."""
    out = tmp_path / "o"
    e = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(e):
        rc = main(["convert", "adapter=minimax_dspark", f"out={out}", "+adapter.config.fields[_target_]={default: os.system}"])
    assert rc == 2 and not out.exists(), e.getvalue()
    assert "_target_" in e.getvalue() and len(e.getvalue().strip().splitlines()) == 1


def test_library_overrides_checked_the_same():
    with pytest.raises(UserError) as e:
        load_spec("minimax_dspark", ["+docs.serving.x={_target_: os.system}"])
    assert "_target_" in e.value.problems[0]


# minimax_dspark's weights.rename has 3 items
LIST_STEPS = [
    ("a Unicode digit", "adapter.weights.rename.\u00b2.to=x", "ASCII digits"),
    ("a Unicode digit in a layer key", "+adapter.attention.layers.\u0663.causal=true", "ASCII digits"),
    ("brackets on a list", "adapter.weights.rename[0].to=x", "is a list"),
    ("a negative index", "adapter.weights.rename.-1.to=x", "is a list"),
    ("a name on a list", "adapter.weights.rename.first.to=x", "is a list"),
    ("an index past the end", "adapter.weights.rename.99.to=x", "no item 99"),
    ("the index one past the end without +", "adapter.weights.rename.3={kind: prefix, match: a, to: b}", "no item 3"),
    ("+ two past the end", "+adapter.weights.rename.4={kind: prefix, match: a, to: b}", "no item 4"),
    ("+ one past the end, then a field", "+adapter.weights.rename.3.to=x", "no item 3"),
    ("an empty step", "adapter.attention..window=3", "empty step"),
]


@pytest.mark.parametrize("label,arg,needle", LIST_STEPS, ids=[s[0] for s in LIST_STEPS])
def test_list_steps_are_plain_indices_within_the_list(label, arg, needle):
    assert needle in refused(arg)
    record(AREA, f"override list step: {label}", "exit 2, one line naming the argument")



def test_a_key_a_free_mapping_lacks_asks_for_plus():
    """A key that a free mapping (``synth.config``) lacks: the line says where the key's path
    leaves what exists and to prefix ``+``; with ``+`` the key is added."""
    line = refused("adapter.synth.config.new_key=1")
    assert "synth.config has no key 'new_key' yet" in line and "('+adapter.synth.config.new_key=1')" in line, line
    assert accepted("+adapter.synth.config.new_key=1").synth.config["new_key"] == 1
    record(AREA, "override of a key a free mapping lacks", "exit 2, one line: prefix it with +")

def test_list_index_bounds_just_inside():
    spec = accepted("adapter.weights.rename.2.to=x")  # the last item
    assert spec.weights.rename[2].to == "x"
    spec = accepted("+adapter.weights.rename.3={kind: prefix, match: zz., to: ''}")  # exactly one past, with +
    assert len(spec.weights.rename) == 4 and spec.weights.rename[3].match == "zz."
    spec = accepted("~adapter.weights.rename.2")
    assert len(spec.weights.rename) == 2


def test_key_length_bounded_and_linear():
    base = "adapter.attention."
    at = base + "a" * (MAX_KEY_CHARS - len(base))  # just at the bound: parsed (an unknown key)
    line = refused(at + "=1")
    assert f"at most {MAX_KEY_CHARS}" not in line and "unknown key" in line and "Errno" not in line, line
    over = base + "a" * (MAX_KEY_CHARS - len(base) + 1)
    assert f"at most {MAX_KEY_CHARS}" in refused(over + "=1")
    big = "adapter." + "a." * 24000 + "b=1"  # 48 KB of steps: refused before any parsing
    t = time.process_time()
    assert "characters" in refused(big)
    assert time.process_time() - t < 0.5
    record(AREA, "48 KB override key", "refused in milliseconds (keys at most 256 characters)")


def test_value_digits_and_size_bounded():
    n = 10 ** (MAX_DIGITS - 1)  # 64 digits: read, then refused as past MAX_INT (a different line)
    assert "digits" not in refused(f"+adapter.docs.serving.x={n}")
    assert f"more than {MAX_DIGITS} digits" in refused(f"+adapter.docs.serving.x={10 ** MAX_DIGITS}")
    assert "digits" in refused("adapter.attention.window=" + "9" * 5000)
    assert "digits" in refused("+adapter.config.fields[a.b]={default: " + "1" * 5000 + "}")
    accepted(f"+adapter.docs.serving.max_concurrency={MAX_INT}")
    assert "magnitude" in refused(f"+adapter.docs.serving.max_concurrency={MAX_INT + 1}")
    text = "x" * (MAX_VALUE_CHARS - 2)
    spec = accepted(f"adapter.description='{text}'")  # just at the bound (quotes included)
    assert spec.description == text
    assert f"{MAX_VALUE_CHARS + 1} characters" in refused(f"adapter.description='{text}x'")
    record(AREA, "5,000-digit integer in an override", "exit 2, one line naming the argument")


UNHOLDABLE = [
    ("a date", "+adapter.config.fields[x.y]={default: 2024-01-01}", "a date"),
    ("a date and time", "+adapter.config.fields[x.y]={default: 2024-01-01 10:00:00}", "a date and time"),
    ("a set", "+adapter.config.fields[x.y]={default: !!set {a: null}}", "a set"),
    ("bytes", "+adapter.config.fields[x.y]={default: !!binary aGVsbG8=}", "bytes"),
    ("infinity", "+adapter.docs.serving.x=1e400", "not a finite number"),
    ("NaN", "+adapter.config.fields[x.y]={default: .nan}", "not a finite number"),
]


@pytest.mark.parametrize("label,arg,needle", UNHOLDABLE, ids=[u[0] for u in UNHOLDABLE])
def test_values_a_spec_cannot_hold(label, arg, needle):
    assert needle in refused(arg)
    record(AREA, f"override value a spec cannot hold: {label}", "exit 2, one line naming the argument")


def test_default_dtype_that_changes_nothing_is_refused(tmp_path):
    """``config.default_dtype`` applies only to a config.json without a dtype key: with one, the
    override changed nothing (exit 0); now it is refused naming the argument."""
    e = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(e):
        rc = main(["convert", "adapter=minimax_dspark", f"out={tmp_path / 'o'}", "adapter.config.default_dtype=float16"])
    lines = e.getvalue().strip().splitlines()
    assert rc == 2 and lines[-1].startswith("error: command line: adapter.config.default_dtype=float16: changes nothing")
    record(AREA, "adapter.config.default_dtype on a config that names its dtype", "exit 2: changes nothing")


def test_bad_layer_index_blames_the_override(tmp_path):
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.convert.plan import plan
    from draftsmith.framework.convert.synth import synthesize

    src = tmp_path / "s"
    synthesize(load_adapter("minimax_dspark"), "tiny", src, seed=1)
    n = len(plan(load_adapter("minimax_dspark"), src).resolved.layers)
    for i, ok in ((n - 1, True), (n, False)):
        e = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(e):
            rc = main(["inspect", "adapter=minimax_dspark", f"source={src}", f"+adapter.attention.layers.{i}.causal=true"])
        if ok:
            assert rc == 0, e.getvalue()
        else:
            assert rc == 2 and e.getvalue().startswith(
                f"error: command line: +adapter.attention.layers.{i}.causal=true: attention.layers.{i}: no such layer")
    record(AREA, "an override of a layer past the drafter's", "exit 2, names the argument (not config.json)")


@pytest.mark.parametrize("serving,needle", [({"mask_token_id": 0}, "contradicts the derived"),
                                            ({"no_such_field": 1}, "is not a field"),
                                            ({"max_concurrency": 4}, None)])
def test_docs_validates_serving_snippets_like_emit(tmp_path, serving, needle):
    import json

    ad = tmp_path / "ad"
    ad.mkdir()
    (ad / "mine.yaml").write_text("name: mine\nextends: minimax_dspark\n"
                                  f"docs: {{model: m, example_checkpoint: e, serving: {json.dumps(serving)}}}\n")
    e = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(e):
        rc = main(["docs", f"adapter_dir={ad}", f"out={tmp_path / 'docs'}"])
    if needle is None:
        assert rc == 0, e.getvalue()
    else:
        assert rc == 2 and needle in e.getvalue() and "mine.yaml" in e.getvalue(), e.getvalue()
        assert not (tmp_path / "docs").exists()
        record(AREA, f"docs with a serving snippet emit refuses ({needle})", "exit 2, names the spec file")
