"""Hostile adapter specs: malformed YAML, wrong types, unknown keys, bad regexes, missing
sections, impossible combinations, code-execution attempts and escaping ``extends:``.

Every case runs ``draftsmith inspect`` in-process on a spec file written into a fresh
adapter_dir and must end in exit 2 with one-line ``error: <file>[:line]: <key path>: ...``
messages on stderr, never a traceback, and never run code.
"""

from __future__ import annotations

import copy
import difflib
import re
import shutil
import string
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from draftsmith.framework.spec import schema as S
from draftsmith.transforms.regex import MAX_REGEX_LEN, compile_regex
from draftsmith.framework.compile.family import get_family
from draftsmith.transforms.base import check_dtype_name, get_transform
from draftsmith.framework.cli.compose import CLI_KEYS
from support.cli import run_cli
from support.reliability_log import record

BASE_FILE = Path(__file__).resolve().parents[2] / "adapters" / "minimax_dspark.yaml"
BASE = yaml.safe_load(BASE_FILE.read_text())
CASES = settings(max_examples=15, deadline=None, derandomize=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.fixture(scope="module")
def source(checkpoints):
    """The session's tiny minimax_dspark source checkpoint (conftest.py), read only."""
    return checkpoints("minimax_dspark").source


_TMP_ROOT: list[Path] = []  # made by the first test that writes a spec (not at collection), removed after the module


@pytest.fixture(scope="module", autouse=True)
def _tidy():
    yield
    for root in _TMP_ROOT:
        shutil.rmtree(root, ignore_errors=True)


def fresh_dir() -> Path:
    if not _TMP_ROOT:
        _TMP_ROOT.append(Path(tempfile.mkdtemp(prefix="draftsmith-hostile-specs-")))
    return Path(tempfile.mkdtemp(prefix="spec-", dir=_TMP_ROOT[0]))


def expect_refused(args: list[str], file: Path | str, *, key: str | None = None, line: bool = False,
                   contains: str | None = None) -> str:
    """Exit 2; every stderr line is ``error: <file>...``; ``key`` (dotted) and ``contains`` appear."""
    rc, out, err, _ = run_cli(args)
    assert rc == 2, f"exit {rc}, stdout={out[-400:]!r} stderr={err!r}"
    lines = err.strip().splitlines()
    assert lines, "no error message"
    assert "Traceback" not in err
    for l in lines:
        assert l.startswith(f"error: {file}"), l
    if line:
        assert any(re.match(rf"error: {re.escape(str(file))}:\d+: ", l) for l in lines), lines
    if key is not None:
        assert any(f": {key}" in l for l in lines), (key, lines)
    if contains is not None:
        assert any(contains in l for l in lines), (contains, lines)
    return err


def base_text(name: str) -> str:
    """The shipped minimax_dspark spec's text, renamed to ``name`` (a spec is named by its file)."""
    text = BASE_FILE.read_text()
    assert text.count("\nname: minimax_dspark\n") == 1
    return text.replace("\nname: minimax_dspark\n", f"\nname: {name}\n")


def write_spec(d: Path, name: str, data=None, text: str | None = None) -> Path:
    """Write spec ``name`` as ``d/name.yaml``; a mapping gets ``name: name`` (file name == name)."""
    p = d / f"{name}.yaml"
    if text is None:
        data = copy.deepcopy(data)
        if isinstance(data, dict):
            data["name"] = name
        text = yaml.safe_dump(data, sort_keys=False)
    p.write_text(text)
    return p


def inspect_args(name: str, d: Path, source: Path) -> list[str]:
    return ["inspect", f"adapter={name}", f"adapter_dir={d}", f"source={source}"]


def fresh_name() -> str:
    return "h" + uuid.uuid4().hex[:10]


# ----------------------------------------------------------------------------- schema-typed paths
def _typed_leaves(data, path=()):
    """(path, value) of every leaf whose type the schema (or a transform's params) checks."""
    free = [("synth", "config"), ("synth", "tiny"), ("docs", "serving"), ("config", "fixed")]  # fixed: any JSON value
    if any(path[: len(f)] == f for f in free):
        return
    if len(path) == 4 and path[:2] == ("config", "fields") and path[3] == "default":
        return
    if isinstance(data, dict):
        if path:
            yield path, data
        for k, v in data.items():
            yield from _typed_leaves(v, path + (k,))
    elif isinstance(data, list):
        yield path, data
        for i, v in enumerate(data):
            yield from _typed_leaves(v, path + (i,))
    elif data is not None and path != ("name",):
        yield path, data


TYPED = list(_typed_leaves(BASE))


def dotted(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def set_path(data, path, value):
    for p in path[:-1]:
        data = data[p]
    data[path[-1]] = value


def del_path(data, path):
    for p in path[:-1]:
        data = data[p]
    del data[path[-1]]


def get_path(data, path):
    for p in path:
        data = data[p]
    return data


_BOOLISH = {"0", "1", "off", "on", "f", "t", "false", "true", "n", "no", "y", "yes"}
words = st.text(string.ascii_letters, min_size=2, max_size=8)


def wrong_value(orig):
    """Values of a type the field cannot take (pydantic's lax coercions excluded)."""
    dicts = st.dictionaries(words, st.integers(), min_size=1, max_size=2)
    ints = st.integers(-10**6, 10**6)
    if isinstance(orig, bool):
        return st.one_of(words.filter(lambda w: w.lower() not in _BOOLISH), st.lists(ints, min_size=1, max_size=3), dicts)
    if isinstance(orig, int):
        return st.one_of(words, st.lists(ints, min_size=1, max_size=3), dicts,
                         st.floats(0.1, 0.9).map(lambda f: f + 3))
    if isinstance(orig, str):
        return st.one_of(ints, st.lists(ints, min_size=1, max_size=3), dicts, st.booleans())
    if isinstance(orig, list):
        return st.one_of(ints, dicts, st.booleans())
    if isinstance(orig, dict):
        return st.one_of(ints, st.lists(ints, min_size=1, max_size=3), words, st.booleans())
    raise AssertionError(orig)


# ----------------------------------------------------------------------------- 1. malformed YAML
BREAKERS = ["key: [unclosed, list", "a: b: c", "\tindented: with tab", "x: {a: 1", "- item\nkey: v",
            "'unterminated: string", "&anchor *alias: 1", "x: !!python/object/apply:os.system ['true']",
            "? [complex]\n: key", "%DIRECTIVE", "key: @reserved", "key: `backtick"]


@CASES
@given(data=st.data())
def test_malformed_yaml(data, source):
    d, name = fresh_dir(), fresh_name()
    text = base_text(name)
    text_lines = text.splitlines()
    breaker = data.draw(st.sampled_from(BREAKERS), label="breaker")
    at = data.draw(st.integers(0, len(text_lines)), label="line")
    extra = data.draw(st.text(string.ascii_lowercase, max_size=5), label="noise")
    broken = "\n".join(text_lines[:at] + [breaker.replace("key", "key" + extra)] + text_lines[at:]) + "\n"
    try:
        yaml.safe_load(broken)
        assume(False)  # still well-formed YAML (e.g. inside a block scalar): not this class
    except yaml.YAMLError:
        pass
    f = write_spec(d, name, text=broken)
    expect_refused(inspect_args(name, d, source), f, line=True, contains="malformed YAML")
    record("specs", "malformed YAML (syntax error inserted at a random line)", "exit 2, file:line")


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(["binary", "empty", "scalar", "list", "bomb", "recursive", "deep", "huge", "dupkey"]),
       n=st.integers(2, 40))
def test_malformed_files(kind, n, source):
    d, name = fresh_dir(), fresh_name()
    if kind == "binary":
        text = None
        f = d / f"{name}.yaml"
        f.write_bytes(f"name: {name}\n".encode() + bytes([0xFF, 0xFE, 0x80 + n % 64]) * n)
    else:
        text = {
            "empty": "",
            "scalar": f"just a string {n}\n",
            "list": "\n".join(f"- {i}" for i in range(n)) + "\n",
            "bomb": "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
                    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 6 + n % 4)),
            "recursive": f"name: {name}\nfamily: &r [x, *r]\n",
            "deep": "a: " + "[" * (3000 + n) + "]" * (3000 + n) + "\n",
            "huge": f"name: {name}\ndescription: '" + "x" * (2**20 + n) + "'\n",
            "dupkey": base_text(name) + f"{sorted(BASE)[n % len(BASE)]}: again\n",
        }[kind]
        f = write_spec(d, name, text=text)
    t = time.perf_counter()
    expect_refused(inspect_args(name, d, source), f)
    assert time.perf_counter() - t < 10
    record("specs", f"malformed file: {kind}", "exit 2, names the file")


# ----------------------------------------------------------------------------- 2. wrong types
@CASES
@given(data=st.data())
def test_wrong_types(data, source):
    path, orig = data.draw(st.sampled_from(TYPED), label="path")
    value = data.draw(wrong_value(orig), label="value")
    spec = copy.deepcopy(BASE)
    set_path(spec, path, value)
    d, name = fresh_dir(), fresh_name()
    f = write_spec(d, name, spec)
    expect_refused(inspect_args(name, d, source), f, key=dotted(path))
    record("specs", "wrong type at a random schema-typed key", "exit 2, names file and key path")


#: YAML values a spec cannot hold, each in a mapping the schema leaves free (a transform's params)
UNHOLDABLE = {"integer past the int64 range": "9223372036854775808", "negative integer past it": "-9223372036854775809",
              "infinity": ".inf", "not a number": ".nan", "date": "2024-01-01",
              "bytes": "!!binary aGVsbG8=", "set": "!!set {a: null}"}


@pytest.mark.parametrize("kind", sorted(UNHOLDABLE))
def test_values_no_spec_holds_are_refused_in_the_file(kind, source):
    """Refused by the file's own check, naming file, line and key, before any override is applied."""
    name, d = fresh_name(), fresh_dir()
    text = base_text(name).replace("params: {mode: keep}", f"params: {{mode: {{deep: {UNHOLDABLE[kind]}}}}}")
    assert text != base_text(name)
    f = write_spec(d, name, text=text)
    expect_refused(inspect_args(name, d, source), f, key="weights.transforms[2].params.mode.deep", line=True)
    record("specs", f"a value no spec holds in the file: {kind}", "exit 2, names file, line and key path")


# ----------------------------------------------------------------------------- 3. unknown keys
MODELS = {(): S.AdapterSpec, ("match",): S.MatchSpec, ("config",): S.ConfigSpec,
          ("weights",): S.WeightsSpec, ("attention",): S.AttentionSpec, ("docs",): S.DocsSpec,
          ("synth",): S.SynthSpec, ("weights", "rename", 0): S.RenameRule,
          ("weights", "transforms", 1): S.TransformRule,
          ("config", "fields", "intermediate_size"): S.FieldRule,
          ("attention", "lowering", "windowed"): S.LoweringChoice}


def known(model) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def misspell(word: str, how: int, pos: int, ch: str) -> str:
    pos %= len(word)
    if how == 0:
        return word[:pos] + word[pos + 1:]
    if how == 1 and pos + 1 < len(word):
        return word[:pos] + word[pos + 1] + word[pos] + word[pos + 2:]
    if how == 2:
        return word[:pos] + word[pos] + word[pos:]
    return word[:pos] + ch + word[pos + 1:]


@CASES
@given(data=st.data())
def test_misspelt_keys(data, source):
    where = data.draw(st.sampled_from(sorted(MODELS, key=str)), label="where")
    keys = known(MODELS[where])
    orig = data.draw(st.sampled_from([k for k in keys if len(k) >= 4]), label="key")
    bad = misspell(orig, data.draw(st.integers(0, 3)), data.draw(st.integers(0, 50)),
                   data.draw(st.sampled_from(string.ascii_lowercase)))
    assume(bad not in keys and bad != "extends" and not bad.startswith("_"))
    spec = copy.deepcopy(BASE)
    node = get_path(spec, where)
    node[bad] = node.pop(orig) if orig in node else 1
    d, name = fresh_dir(), fresh_name()
    f = write_spec(d, name, spec)
    err = expect_refused(inspect_args(name, d, source), f, key=dotted(where + (bad,)), line=True,
                         contains="unknown key")
    m = re.search(r"did you mean '([^']+)'\?", err)
    assert m, err
    ratio = lambda k: difflib.SequenceMatcher(None, bad, k).ratio()  # noqa: E731
    assert m.group(1) in keys and ratio(m.group(1)) >= ratio(orig), (bad, orig, m.group(1))
    record("specs", "misspelt key (one edit) at a random level", "exit 2, file:line, key path, did-you-mean")


@CASES
@given(key=st.text(string.ascii_lowercase + "_", min_size=3, max_size=12), where=st.sampled_from(sorted(MODELS, key=str)))
def test_unknown_keys(key, where, source):
    assume(key not in known(MODELS[where]) and key != "extends" and not key.startswith("_"))
    spec = copy.deepcopy(BASE)
    get_path(spec, where)[key] = "x"
    d, name = fresh_dir(), fresh_name()
    f = write_spec(d, name, spec)
    expect_refused(inspect_args(name, d, source), f, key=dotted(where + (key,)), line=True, contains="unknown key")
    record("specs", "random unknown key at a random level", "exit 2, file:line, key path")


@CASES
@given(data=st.data())
def test_misspelt_command_line_keys(data, source):
    orig = data.draw(st.sampled_from([k for k in CLI_KEYS if len(k) >= 5]))
    bad = misspell(orig, data.draw(st.integers(0, 3)), data.draw(st.integers(0, 50)),
                   data.draw(st.sampled_from(string.ascii_lowercase)))
    assume(bad not in CLI_KEYS and bad != "adapter" and "." not in bad)
    rc, out, err, _ = run_cli(["inspect", "adapter=minimax_dspark", f"source={source}", f"{bad}=1"])
    assert rc == 2 and err.startswith("error: command line: unknown key") and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and "did you mean '" in err, err
    record("specs", "misspelt command-line key", "exit 2, one line, did-you-mean")


# ----------------------------------------------------------------------------- 4. regexes
ATOMS = ["a", r"\d", r"\w", ".", "[a-z]", r"\.", "(?:ab)", "x"]
INNER_Q = ["+", "*", "{1,}", "{2,5}", "?"]
OUTER_Q = ["+", "*", "{1,}", "{2,}", "{2,9}"]


@st.composite
def catastrophic(draw):
    """Nested quantifiers / repeated overlapping alternations, wrapped in random context."""
    a = draw(st.sampled_from(ATOMS))
    kind = draw(st.integers(0, 3))
    if kind == 0:  # (a+)+
        core = f"({a}{draw(st.sampled_from(INNER_Q))}){draw(st.sampled_from(OUTER_Q))}"
    elif kind == 1:  # ((a+))+ : nesting hidden behind an extra group
        core = f"((?:{a}{draw(st.sampled_from(INNER_Q))})){draw(st.sampled_from(OUTER_Q))}"
    elif kind == 2:  # (a|aa)+ : overlapping branches
        core = f"({a}|{a}{a}){draw(st.sampled_from(OUTER_Q))}"
    else:  # (a|)+ : an empty branch
        core = f"({a}|{draw(st.sampled_from(ATOMS))}|){draw(st.sampled_from(OUTER_Q))}"
    pre = draw(st.sampled_from(["", "^", r"^layers\.", "x"]))
    post = draw(st.sampled_from(["", "$", r"\.weight$", "!"]))
    return pre + core + post


invalid_regex = st.sampled_from(["(", ")", "[a-", "a{2,1}", "*a", "\\", "(?P<x>a)(?P<x>b)", "(?<!a+)b", r"\k",
                                 "a{2000}"]).flatmap(
    lambda r: st.sampled_from(["", "^", "layers"]).map(lambda p: p + r)).filter(lambda r: not _compiles(r))
# valid for Python's re, refused by RE2 (no backtracking features): lookaround, backreferences
unsupported_regex = st.sampled_from([r"(?=a)b", r"(?!a)b", r"(?<=a)b", r"(?<!a)b", r"(a)\1", r"(?P<x>a)(?P=x)",
                                     r"a++", r"(?>a)"]).flatmap(
    lambda r: st.sampled_from(["", "^", r"layers\."]).map(lambda p: p + r))


def _compiles(r: str) -> bool:
    try:
        compile_regex(r)
        return True
    except ValueError:
        return False
oversize = st.integers(MAX_REGEX_LEN + 1, MAX_REGEX_LEN + 200).map(lambda n: "a" * n)
REGEX_FIELDS = [(("weights", "transforms", 0, "match"), "transform"),
                (("weights", "rename", 0), "rename")]


@CASES
@given(data=st.data())
def test_bad_regexes_refused(data, source):
    kind = data.draw(st.sampled_from(["invalid", "unsupported", "oversize"]), label="kind")
    rx = data.draw({"unsupported": unsupported_regex, "invalid": invalid_regex, "oversize": oversize}[kind])
    path, field = data.draw(st.sampled_from(REGEX_FIELDS))
    spec = copy.deepcopy(BASE)
    if field == "rename":
        spec["weights"]["rename"].insert(0, {"kind": "regex", "match": rx, "to": "x"})
    else:
        set_path(spec, path, rx)
    d, name = fresh_dir(), fresh_name()
    f = write_spec(d, name, spec)
    expect_refused(inspect_args(name, d, source), f, key=dotted(path), line=True)
    record("specs", f"bad regex: {kind}", "exit 2, file:line, key path")


# Regexes run under RE2 (linear time): patterns that backtrack exponentially in Python's re
# (nested quantifiers, overlapping alternations, many adjacent .*) are accepted and match
# adversarial names of 100 000 characters in milliseconds.
@settings(max_examples=60, deadline=None)
@given(rx=catastrophic())
def test_catastrophic_regexes_run_in_linear_time(rx):
    pat = compile_regex(S.check_regex(rx))
    for subject in ("a" * 100_000 + "!", "ab" * 50_000 + "!", "a1" * 50_000 + "-"):
        t = time.perf_counter()
        pat.search(subject)
        pat.fullmatch(subject)
        assert time.perf_counter() - t < 0.5, (rx, subject[:8])
    record("specs", "catastrophic regex (nested quantifiers, overlapping alternations) under RE2",
           "accepted, 100 000-char name matched in < 0.5 s")


def _rx():
    atom = st.sampled_from(["a", "b", ".", r"\w", "[ab]", r"\d"])

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "*", "?", "{2,}", "{1,3}"])).map("".join),
            st.tuples(inner, inner).map("".join),
            inner.map(lambda r: f"({r})"),
            st.tuples(inner, inner).map(lambda t: f"({t[0]}|{t[1]})"),
        )

    return st.recursive(atom, extend, max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(rx=_rx())
def test_accepted_regexes_do_not_backtrack(rx):
    """Whatever check_regex accepts matches adversarial names in bounded time (RE2)."""
    try:
        S.check_regex(rx)
    except ValueError:
        record("specs", "random regex (RE2)", "refused")
        return
    pat = compile_regex(rx)
    for subject in ("a" * 20_000 + "!", "ab" * 10_000 + "!", "a1" * 10_000 + "-"):
        t = time.perf_counter()
        pat.fullmatch(subject)
        pat.search(subject)
        assert time.perf_counter() - t < 0.5, (rx, subject[:8])
    record("specs", "random regex (RE2)", "accepted, matched in < 0.5 s")


def test_regex_check_known_cases():
    bad = ["(?=a)b", r"(a)\1", "(?<!x)a", "a" * (MAX_REGEX_LEN + 1), "(", "(a)(?P<x>", "a{5000}"]
    good = [r"^layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$", r"(gate|up)+",
            r"(a+)?b", r"^model\.layers\.(\d+)\.(.*)$", ".*", "[(a+)]+", "(a+)+$", "(a|aa)+$",
            ".*.*.*.*.*.*.*x", ".*.*.*.*.*.*!"]
    for r in bad:
        with pytest.raises(ValueError):
            S.check_regex(r)
    for r in good:
        assert S.check_regex(r) == r
    with pytest.raises(ValueError, match="no group 2"):
        S.check_replacement(r"(a)b", r"x\2")
    with pytest.raises(ValueError, match="no group named"):
        S.check_replacement(r"(?P<k>a)b", r"\g<j>")
    S.check_replacement(r"(?P<k>a)(b)", r"\g<k>\2\g<1>")
    record("specs", "bad regex: fixed list", f"{len(bad)} refused, {len(good)} accepted")


# ----------------------------------------------------------------------------- 5. missing sections
REQUIRED = [("name",), ("family",), ("match",), ("docs",), ("synth",), ("match", "architectures"),
            ("docs", "model"), ("docs", "example_checkpoint"), ("synth", "config"),
            ("weights", "rename", 0, "kind"), ("weights", "rename", 0, "match"), ("weights", "rename", 0, "to"),
            ("weights", "transforms", 0, "op")]


@CASES
@given(paths=st.lists(st.sampled_from(REQUIRED), min_size=1, max_size=3, unique=True))
def test_missing_sections(paths, source):
    spec = copy.deepcopy(BASE)
    d, name = fresh_dir(), fresh_name()
    spec["name"] = name  # the file's name, unless the name is one of the removed keys
    gone = []
    for p in sorted(paths, key=len):  # a removed parent hides its children
        if all(q != p[: len(q)] for q in gone):
            del_path(spec, p)
            gone.append(p)
    p = d / f"{name}.yaml"
    p.write_text(yaml.safe_dump(spec, sort_keys=False))  # keep the name removed if asked
    err = expect_refused(inspect_args(name, d, source), p, contains="required key is missing")
    for q in gone:
        assert f": {dotted(q)}: required key is missing" in err, (q, err)
    record("specs", "required key(s) removed (1-3 at once)", "exit 2, one line per missing key path")


# ----------------------------------------------------------------------------- 6. impossible combinations
ident = st.text(string.ascii_lowercase, min_size=3, max_size=8)


def _known(lookup, name: str) -> bool:
    """Whether registry lookup ``lookup`` accepts ``name``."""
    try:
        lookup(name)
    except (KeyError, ValueError):
        return False
    return True


@st.composite
def impossible(draw):
    """(where, value, key path the error must name, text it must contain, label)."""
    k = draw(st.integers(0, 9))
    w = draw(ident)
    if k == 0:
        return ("weights", "rename"), {"kind": "regex", "match": f"{w}(.*)", "to": r"\1", "inverse_match": w}, "weights.rename[0]", "go together", "inverse_match without inverse_to"
    if k == 1:
        kind = draw(st.sampled_from(["prefix", "template"]))
        return ("weights", "rename"), {"kind": kind, "match": w, "to": w, "inverse_match": w, "inverse_to": w}, "weights.rename[0]", "regex only", "inverse_* on a prefix/template rule"
    if k == 2:
        n = draw(st.integers(2, 9))
        return ("weights", "rename"), {"kind": "regex", "match": f"({w})", "to": f"\\{n}"}, "weights.rename[0]", "does not fit", "regex replacement names a missing group"
    if k == 3:
        a, b = draw(ident), draw(ident)
        assume(a != b)
        return ("weights", "rename"), {"kind": "template", "match": f"{w}.{{{a}}}", "to": f"x.{{{b}}}"}, "weights.rename", "placeholders", "template output uses an undefined placeholder"
    if k == 4:
        dev, kind = draw(st.sampled_from(["cpu", "sm90"])), draw(st.sampled_from(["windowed", "full"]))
        return ("attention", "lowering", kind, dev), "trtllm_gen", f"attention.lowering.{kind}.{dev}", "does not run on", "lowering on a device it does not run on"
    if k == 5:
        n = draw(st.integers(1, 50).filter(lambda n: n != 7))
        return ("max_draft_len",), n, "max_draft_len", "contradicts", "max_draft_len contradicting the derived value"
    if k == 6:
        assume(not _known(get_family, w))  # a random identifier may name a real family
        return ("family",), w, "family", "unknown family", "unknown family"
    if k == 7:
        assume(not _known(get_transform, w))  # "fuse", "cast" and "split" are real transforms
        return ("weights", "transforms", 0, "op"), w, "weights.transforms[0].op", "unknown transform", "unknown transform op"
    if k == 8:
        return ("attention", "window"), draw(st.integers(-100, 0)), "attention.window", "greater than or equal to 1", "window < 1"
    assume(not _known(check_dtype_name, w))  # a random identifier may name a dtype
    return ("weights", "transforms", 0, "params"), {"dtype": w}, "weights.transforms[0].params.dtype", "unknown dtype", "unknown dtype in transform params"


@CASES
@given(case=impossible())
def test_impossible_combinations(case, source):
    path, value, key, text, label = case
    spec = copy.deepcopy(BASE)
    if path == ("weights", "rename"):
        spec["weights"]["rename"].insert(0, value)
    else:
        set_path(spec, path, value)
    d, name = fresh_dir(), fresh_name()
    f = write_spec(d, name, spec)
    expect_refused(inspect_args(name, d, source), f, key=key, contains=text)
    record("specs", f"impossible combination: {label}", "exit 2, names file and key path")


# ----------------------------------------------------------------------------- 7. no code runs
RESOLVERS = ["${oc.env:HOME}", "${oc.env:PATH,x}", "${ oc.env:HOME }", "${oc.decode:'1'}", "${oc.create:{}}",
             "${env:HOME}", "${hostile_marker:}", "${hostile_marker:a,b}", "pre ${oc.env:USER} post",
             "${oc.select:x, ${oc.env:HOME}}"]


def _marker_resolver(marker: Path):
    from omegaconf import OmegaConf

    def touch(*_):
        marker.write_text("ran")
        return "x"

    OmegaConf.register_new_resolver("hostile_marker", touch, replace=True)


@CASES
@given(data=st.data())
def test_no_code_runs(data, source):
    d, name = fresh_dir(), fresh_name()
    marker = d / "MARKER"
    _marker_resolver(marker)
    spec = copy.deepcopy(BASE)
    kind = data.draw(st.sampled_from(["_target_", "resolver", "resolver_key", "python_tag"]))
    maps = [p for p, v in TYPED if isinstance(v, dict)] + [()]
    where = data.draw(st.sampled_from(sorted(maps, key=str)))
    node = get_path(spec, where)
    if kind == "_target_":
        node["_target_"] = data.draw(st.sampled_from(["os.system", "builtins.exec", "subprocess.run"]))
        f = write_spec(d, name, spec)
        expect_refused(inspect_args(name, d, source), f, key=dotted(where + ("_target_",)), line=True,
                       contains="`_target_` is refused")
    elif kind in ("resolver", "resolver_key"):
        r = data.draw(st.sampled_from(RESOLVERS))
        if kind == "resolver":
            leaf = data.draw(st.sampled_from([p for p, v in TYPED if isinstance(v, str)]))
            set_path(spec, leaf, r)
        else:
            node[r] = "x"
        f = write_spec(d, name, spec)
        expect_refused(inspect_args(name, d, source), f, line=True, contains="`${` is refused")
    else:
        tag = data.draw(st.sampled_from([
            f"!!python/object/apply:pathlib.Path.touch [{str(marker)!r}]",
            f"!!python/object/apply:os.system ['touch {marker}']",
            "!!python/name:os.system", "!!python/module:os", "!!python/object:pathlib.Path {}",
        ]))
        text = base_text(name) + f"extra: {tag}\n"
        f = write_spec(d, name, text=text)
        expect_refused(inspect_args(name, d, source), f, line=True, contains="malformed YAML")
    assert not marker.exists(), "a spec ran code"
    record("specs", f"code execution attempt: {kind}", "exit 2, refused, nothing ran")


# Interpolation of any kind (nested resolver names, references, quoting and escaping tricks):
# refused in a spec file and on the command line; no environment value reaches any output.
SECRET_VAR = "DRAFTSMITH_HOSTILE_SECRET"
INTERPOLATIONS = ["${oc.env:%s}", "${oc.${x}:%s}", "${${x}:%s}", "${oc.env:${x},%s}", "pre ${oc.env:%s} post",
                  "\\${oc.env:%s}", "$${oc.env:%s}", "${oc.select:nope,${oc.env:%s}}", "${ oc.env : %s }",
                  "${adapter.name}%s", "${oc.decode:${oc.env:%s}}", "${oc.env:{%s}}"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_interpolation_anywhere(data, source, monkeypatch):
    secret = "s3cr3t-" + uuid.uuid4().hex
    monkeypatch.setenv(SECRET_VAR, secret)
    trick = data.draw(st.sampled_from(INTERPOLATIONS)) % SECRET_VAR
    where = data.draw(st.sampled_from(["file value", "file key", "file nested", "command line spec",
                                       "command line option", "command line list"]))
    d, name = fresh_dir(), fresh_name()
    spec = copy.deepcopy(BASE)
    args = inspect_args(name, d, source)
    if where == "file value":
        spec["description"] = trick
    elif where == "file key":
        spec["config"]["fields"][trick] = {"default": 1}
    elif where == "file nested":
        spec["config"]["fields"]["x"] = {"default": {"a": [1, {"b": trick}]}}
    elif where == "command line spec":
        args.append(f"+adapter.config.fields.x.default={trick}")
    elif where == "command line option":
        args.append(f"dump={trick}")
    else:
        args.append(f"+adapter.config.fields.x.default=[1, '{trick}']")
    f = write_spec(d, name, spec)
    rc, out, err, _ = run_cli(args)
    assert rc == 2, (where, trick, rc, out[-300:], err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    if where.startswith("file"):
        assert lines[0].startswith(f"error: {f}:"), lines
    assert secret not in out + err and str(Path.home()) not in out + err.replace(str(d), "")
    record("specs", f"interpolation trick ({where})", "exit 2, one line, no environment value in output")


# ----------------------------------------------------------------------------- 8. extends
@CASES
@given(data=st.data())
def test_extends_cannot_escape(data, source):
    d = fresh_dir()
    outside = d.parent / f"outside-{uuid.uuid4().hex[:6]}"
    outside.mkdir()
    (outside / "evil.yaml").write_text(BASE_FILE.read_text().replace("name: minimax_dspark", "name: evil"))
    name = fresh_name()
    target = data.draw(st.sampled_from([
        f"../{outside.name}/evil", f"../{outside.name}/evil.yaml", str(outside / "evil"), "../evil",
        "/etc/passwd", "minimax_dspark.yaml", "./minimax_dspark", "a/b", "MiniMax", "~/x", "",
    ]))
    f = write_spec(d, name, text=f"name: {name}\nextends: {target!r}\n")
    expect_refused(inspect_args(name, d, source), f, key="extends", line=True, contains="adapter name")
    record("specs", "extends: a path or non-name", "exit 2, file:line")


@CASES
@given(n=st.integers(1, 5), data=st.data())
def test_extends_cycles(n, data, source):
    d = fresh_dir()
    names = [fresh_name() for _ in range(n)]
    for i, nm in enumerate(names):
        write_spec(d, nm, text=f"name: {nm}\nextends: {names[(i + 1) % n]}\n")
    start = data.draw(st.sampled_from(names))
    err = expect_refused(inspect_args(start, d, source), d, key="extends", contains="cycle")
    assert re.match(rf"error: {re.escape(str(d))}/h\w+\.yaml:2: extends: cycle through ", err), err
    record("specs", "extends: cycle (length 1-5)", "exit 2, file:line, the cycle")


@CASES
@given(base=ident)
def test_extends_unknown(base, source):
    d, name = fresh_dir(), fresh_name()
    assume(base != "minimax_dspark")
    f = write_spec(d, name, text=f"name: {name}\nextends: '{base}'\n")
    expect_refused(inspect_args(name, d, source), f, key="extends", line=True, contains="unknown adapter")
    record("specs", "extends: unknown adapter", "exit 2, file:line")


def test_valid_extends_still_works(source):
    """The control: the refusals above are not a loader that refuses everything."""
    d, name = fresh_dir(), fresh_name()
    write_spec(d, name, text=f"name: {name}\nextends: minimax_dspark\ndescription: derived from minimax_dspark\n")
    rc, out, err, _ = run_cli(inspect_args(name, d, source))
    assert rc == 0, err


@CASES
@given(data=st.data())
def test_misspelt_transform_params(data, source):
    """Transform params are checked by the op's own schema at compile time: same did-you-mean."""
    from draftsmith.transforms.base import get_transform

    i = data.draw(st.integers(0, len(BASE["weights"]["transforms"]) - 1))
    rule = BASE["weights"]["transforms"][i]
    keys = sorted(get_transform(rule["op"]).Params.model_fields)
    orig = data.draw(st.sampled_from([k for k in keys if len(k) >= 4]))
    bad = misspell(orig, data.draw(st.integers(0, 3)), data.draw(st.integers(0, 50)),
                   data.draw(st.sampled_from(string.ascii_lowercase)))
    assume(bad not in keys)
    spec = copy.deepcopy(BASE)
    params = spec["weights"]["transforms"][i].setdefault("params", {})
    params[bad] = params.pop(orig) if orig in params else 1
    d, name = fresh_dir(), fresh_name()
    f = write_spec(d, name, spec)
    err = expect_refused(inspect_args(name, d, source), f, key=f"weights.transforms[{i}].params.{bad}",
                         contains="did you mean '")
    m = re.search(r"did you mean '([^']+)'\?", err)
    ratio = lambda k: difflib.SequenceMatcher(None, bad, k).ratio()  # noqa: E731
    assert m.group(1) in keys and ratio(m.group(1)) >= ratio(orig), (bad, orig, m.group(1))
    record("specs", "misspelt transform params key", "exit 2, file, key path, did-you-mean")


OVERRIDE_LEVELS = {("attention",): S.AttentionSpec, ("weights",): S.WeightsSpec, ("docs",): S.DocsSpec,
                   ("config",): S.ConfigSpec, ("attention", "lowering", "windowed"): S.LoweringChoice, (): S.AdapterSpec}


@CASES
@given(data=st.data())
def test_misspelt_adapter_overrides(data, source):
    """``adapter.<path>.<misspelt>=v`` on the command line: one line naming the argument and key path, did-you-mean."""
    where = data.draw(st.sampled_from(sorted(OVERRIDE_LEVELS, key=str)))
    keys = known(OVERRIDE_LEVELS[where])
    orig = data.draw(st.sampled_from([k for k in keys if len(k) >= 4]))
    bad = misspell(orig, data.draw(st.integers(0, 3)), data.draw(st.integers(0, 50)),
                   data.draw(st.sampled_from(string.ascii_lowercase)))
    assume(bad not in keys and bad.isidentifier())
    key = ".".join(("adapter",) + where + (bad,))
    rc, out, err, _ = run_cli(["inspect", "adapter=minimax_dspark", f"source={source}", f"{key}=1"])
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    # a command-line mistake names the command-line argument, not a line of the shipped YAML
    assert err.startswith(f"error: command line: {key}=1: ") and ".yaml" not in err, err
    assert f"{'.'.join(where + (bad,))}: unknown key" in err, err
    m = re.search(r"did you mean '([^']+)'\?", err)
    ratio = lambda k: difflib.SequenceMatcher(None, bad, k).ratio()  # noqa: E731
    assert m and m.group(1) in keys and ratio(m.group(1)) >= ratio(orig), (bad, orig, err)
    record("specs", "misspelt adapter.* override on the command line", "exit 2, one line, command-line key, did-you-mean")
