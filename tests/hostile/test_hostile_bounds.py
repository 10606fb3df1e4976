"""Hostile input, round two: bounded work for every input (time, memory, file kinds).

Huge headers (100 000 tensors), catastrophic regexes, FIFOs and devices where files are
expected, oversize configs behind links, checkpoints whose index escapes the folder,
malformed numbers in headers and configs: each ends in one ``error:`` line per problem and
exit 2 (``inspect``: 1 for an incomplete checkpoint) within seconds, nothing written.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.plan import MAX_PROBLEM_LINES, Plan, Problem
from draftsmith.framework.convert.checkpoint import SourceTensor
from draftsmith.framework.convert.synth import synthesize
from draftsmith.transforms.base import TensorMeta
from support.cli import run_cli
from support.reliability_log import record

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from many_tensors import make_converting_source, write_many_tensor_shard  # noqa: E402

import torch  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("pristine") / "ckpt"
    synthesize(load_adapter("minimax_dspark"), "tiny", d, seed=5)
    shutil.rmtree(d / "target")
    return d


def clone(base: Path, tmp_path: Path) -> Path:
    d = tmp_path / "src"
    shutil.copytree(base, d)
    return d


run = run_cli


def refused(args: list[str], *needles: str, rc_want: int = 2, seconds: float = 8.0) -> str:
    rc, out, err, dt = run(args)
    assert rc == rc_want, f"exit {rc}: {out[-300:]} {err[-600:]}"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines and all(l.startswith("error: ") for l in lines), err[-2000:]
    for n in needles:
        assert any(n in l for l in lines), f"{n!r} not in {lines[:5]}"
    assert dt < seconds, f"took {dt:.1f} s"
    return err


# ----------------------------------------------------------------------------- linear plans
def test_problem_lines_linear():
    """``Plan.problem_lines`` on 30 000 problems in well under a second per 10 000 (was quadratic)."""
    n = 30_000
    f = Path("/x/model.safetensors")
    meta = TensorMeta((1,), torch.float32)
    sources = {f"src.layers.{i}.w": SourceTensor(f"src.layers.{i}.w", f, meta) for i in range(n)}
    renamed = {s: s.replace("src.", "dst.") for s in sources}
    problems = [Problem(f"dst.layers.{i}.w", "UNEXPECTED", f"from src.layers.{i}.w") for i in range(n)]
    plan = Plan(Path("/x"), {}, sources, renamed, [], [], {}, [], problems)
    t = time.perf_counter()
    lines = plan.problem_lines()
    dt = time.perf_counter() - t
    assert dt < 3.0, dt
    assert len(lines) == MAX_PROBLEM_LINES + 1
    assert lines[0] == "/x/model.safetensors: dst.layers.0.w | UNEXPECTED | from src.layers.0.w"
    assert lines[-1].startswith(f"/x: ... and {n - MAX_PROBLEM_LINES} more problems ({n - MAX_PROBLEM_LINES} UNEXPECTED)")
    every = plan.problem_lines(limit=n)
    assert len(every) == n and every[n - 1].startswith("/x/model.safetensors: dst.layers.29999.w | UNEXPECTED")
    record("bounds", "30 000 plan problems formatted", "linear, < 3 s, report capped at 200 lines + a count")


def test_many_tensor_header_in_seconds(base, tmp_path):
    """A 20 000-tensor extra shard (bench/many_tensors.py runs 100 000): convert refuses in
    seconds. CPU time of this process is bounded (other sessions' load does not count);
    the quadratic report took ~36 s at this size, the linear one ~1 s."""
    src = clone(base, tmp_path)
    write_many_tensor_shard(src / "extra.safetensors", 20_000)
    out = tmp_path / "out"
    cpu = time.process_time()
    err = refused(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}"], "UNEXPECTED",
                  "more problems", seconds=9.0)
    cpu = time.process_time() - cpu
    assert cpu < 5.0, f"{cpu:.1f} s of CPU"
    assert len(err.splitlines()) == MAX_PROBLEM_LINES + 1
    assert not out.exists()
    record("bounds", "20 000-tensor shard header (convert)", "exit 2 in < 5 s CPU, 201 lines, nothing written")


def test_many_tensor_checkpoint_converts_in_seconds(tmp_path):
    """About 6 000 expected tensors (333 layers of MXFP8 linears + scales and norms) convert
    in seconds: tensor data is read by header offset (a ``safe_open`` per tensor parses the
    whole header each time: quadratic, ~60 s at this size) and small tensors convert stacked
    (~0.6 s here; 3.1 s one by one, before framework/convert/batch.py). The output, read
    back with safetensors' own loader, equals a float64 oracle on the last layer."""
    from safetensors.torch import load_file

    src, n = make_converting_source(tmp_path, 6000)
    out = tmp_path / "out"
    cpu = time.process_time()
    rc, _, err, dt = run(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}", "progress=false"])
    cpu = time.process_time() - cpu
    assert rc == 0, err[-1000:]
    assert cpu < 3.0, f"{cpu:.1f} s of CPU for {n} tensors"
    got, raw = load_file(out / "model.safetensors"), load_file(src / "model.safetensors")
    last = json.loads((src / "config.json").read_text())["text_config"]["num_hidden_layers"] - 1
    assert len(got) == n - 7 * (last + 1)  # every MXFP8 scale is folded into its weight
    pre = f"language_model.model.dspark.layers.{last}.decoder_layer."
    for proj in ("self_attn.q_proj", "mlp.down_proj"):
        w = raw[pre + proj + ".weight"].to(torch.float64)
        e = raw[pre + proj + ".weight_scale_inv"].view(torch.uint8).to(torch.float64)
        want = (w * torch.pow(2.0, e - 127).repeat_interleave(32, dim=-1)).to(torch.bfloat16)
        assert torch.equal(got[f"layers.{last}.{proj}.weight"], want), proj
    norm = raw[pre + "input_layernorm.weight"]  # kept as stored (the engine runs it in Gemma mode)
    assert torch.equal(got[f"layers.{last}.input_layernorm.weight"], norm)
    k_norm = (1.0 + raw[pre + "self_attn.k_norm.weight"].to(torch.float64)).to(torch.bfloat16)  # folded: 1 + w
    assert torch.equal(got[f"layers.{last}.self_attn.k_norm.weight"], k_norm)
    record("bounds", "6 000-tensor checkpoint converts", f"exit 0 in < 3 s CPU, equal to a float64 oracle")


def test_regex_fast_path_equals_google_re2():
    """The plan's RE2 tries (engine spans, ASCII matches built from them) give what
    google-re2's own ``str`` methods give: hit or miss, spans, groups, named groups."""
    import random

    import re2

    from draftsmith.transforms.regex import compile_regex

    rng = random.Random(time.time_ns())
    atoms = ["a", "b", ".", "\\d", "[ab]", "(a|b)", "(?P<x>a+)", "(?P<y>[^.]*)", "é", "^", "$", "\\.", "x*",
             "(?:ab)+", "(b)?", "[^.]+"]
    for _ in range(400):
        pat = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 5)))
        try:
            ours = compile_regex(pat)
        except ValueError:
            continue
        theirs = re2.compile(pat)
        for text in ["", "a.b", "layers.12.mlp", "xx.é"] + ["".join(rng.choice("ab.é1x") for _ in range(rng.randint(0, 8)))
                                                         for _ in range(4)]:
            for how in ("search", "match", "fullmatch"):
                a, b = getattr(ours, how)(text), getattr(theirs, how)(text)
                assert (a is None) == (b is None), (pat, text, how)
                if how == "search":
                    assert ours.test(text) == (b is not None), (pat, text)
                if a is not None:
                    assert [a.span(i) for i in range(theirs.groups + 1)] == [b.span(i) for i in range(theirs.groups + 1)]
                    assert (a.groups(), a.groupdict(), a.group()) == (b.groups(), b.groupdict(), b.group()), (pat, text)
                    assert a.groupdict("-") == b.groupdict("-"), (pat, text)


def test_json_depth_fast_path_equals_regex_path():
    """The bracket-depth check on text outside strings (split on quotes when no backslash)
    equals the regex path on random JSON with brackets, quotes and escapes inside strings."""
    import random

    from draftsmith.framework.io import safe_read

    rng = random.Random(time.time_ns())

    def value(d=0):
        r = rng.random()
        if d > 6 or r < 0.3:
            return rng.choice([1, "a[b", 'q"{', "\\", "x]", "é[", 2.5, None, "}}"])
        if r < 0.65:
            return [value(d + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(["k", "{", ']"', "ü"]) + str(i): value(d + 1) for i in range(rng.randint(0, 3))}

    def slow(text):
        depth = best = 0
        for ch in safe_read._BRACKET.findall(safe_read._STRING.sub("", text)):
            depth += 1 if ch in "[{" else -1
            best = max(best, depth)
        return best

    for _ in range(500):
        text = json.dumps(value(), ensure_ascii=rng.random() < 0.5)
        assert safe_read._depth(text) == slow(text), text


def test_catastrophic_rename_regex_converts(base, tmp_path):
    """``.*.*.*.*.*.*!`` as a rename rule: RE2 matches in linear time; the rule matches no
    tensor, so it is refused as UNMATCHED in seconds (Python's re ran past 300 s)."""
    src = clone(base, tmp_path)
    ad = tmp_path / "adapters"
    ad.mkdir()
    text = (Path(__file__).resolve().parents[2] / "adapters" / "minimax_dspark.yaml").read_text()
    text = text.replace("name: minimax_dspark", "name: evil_rx", 1)
    text = text.replace("  rename:\n", "  rename:\n    - {kind: regex, match: '.*.*.*.*.*.*!', to: x}\n", 1)
    (ad / "evil_rx.yaml").write_text(text)
    long_name = "model." + "a" * 5000
    write_many_tensor_shard(src / "long.safetensors", 3, prefix=long_name + "{i}")
    refused(["convert", "adapter=evil_rx", f"adapter_dir={ad}", f"source={src}", f"out={tmp_path / 'o'}"],
            "matches no tensor", seconds=8.0)
    record("bounds", "rename regex .*.*.*.*.*.*! on 5000-char names", "exit 2 (UNMATCHED) in seconds")


# ----------------------------------------------------------------------------- point 7: one line, exit 2
def _header_with(src: Path, mutate) -> Path:
    f = src / "model.safetensors"
    b = f.read_bytes()
    n = int.from_bytes(b[:8], "little")
    text = mutate(b[8:8 + n].decode())
    raw = text.encode()
    raw += b" " * (-len(raw) % 8)
    f.write_bytes(len(raw).to_bytes(8, "little") + raw + b[8 + n:])
    return f


def _first_shape(text: str) -> str:
    h = json.loads(text)
    name = next(k for k in h if k != "__metadata__")
    return name


HEADER_ATTACKS = {
    "Infinity in a shape": lambda t: t.replace('"shape":[', '"shape":[Infinity,', 1),
    "1e400 in a shape": lambda t: t.replace('"shape":[', '"shape":[1e400,', 1),
    "float in a shape": lambda t: t.replace('"shape":[', '"shape":[2.0,', 1),
    "string in a shape": lambda t: t.replace('"shape":[', '"shape":["2",', 1),
    "1e400 in an offset": lambda t: t.replace('"data_offsets":[', '"data_offsets":[1e400,', 1),
    "5000-digit integer": lambda t: t.replace('"data_offsets":[', '"data_offsets":[' + "9" * 5000 + ",", 1),
    "deep nesting": lambda t: t[:-1] + ',"zz":' + "[" * 5000 + "]" * 5000 + "}",
    "NaN constant": lambda t: t.replace('"shape":[', '"shape":[NaN,', 1),
}


@pytest.mark.parametrize("attack", sorted(HEADER_ATTACKS))
@pytest.mark.parametrize("command", ["convert", "inspect"])
def test_header_attacks(attack, command, base, tmp_path):
    src = clone(base, tmp_path)
    text = json.loads((src / "config.json").read_text())  # noqa: F841 (the config stays valid)
    f = _header_with(src, lambda t: HEADER_ATTACKS[attack](t.replace(" ", "")))
    args = [command, "adapter=minimax_dspark", f"source={src}"] + ([f"out={tmp_path / 'o'}"] if command == "convert" else [])
    refused(args, str(f))
    assert not (tmp_path / "o").exists()
    record("bounds", f"shard header: {attack} ({command})", "exit 2, one line naming the file")


def test_directory_named_safetensors(base, tmp_path):
    src = clone(base, tmp_path)
    (src / "zz.safetensors").mkdir()
    refused(["inspect", "adapter=minimax_dspark", f"source={src}"], "zz.safetensors", "directory")
    record("bounds", "directory named *.safetensors", "exit 2, names it")


@pytest.mark.parametrize("where", ["shard", "config", "index"])
def test_fifo_refused_by_stat(where, base, tmp_path):
    src = clone(base, tmp_path)
    if where == "shard":
        victim = src / "fifo.safetensors"
    elif where == "config":
        victim = src / "config.json"
        victim.unlink()
    else:
        victim = src / "model.safetensors.index.json"
    os.mkfifo(victim)
    refused(["inspect", "adapter=minimax_dspark", f"source={src}"], "FIFO", seconds=5.0)
    record("bounds", f"FIFO as the {where}", "exit 2 at once (never opened)")


def test_adapter_yaml_to_dev_zero_and_fifo(base, tmp_path):
    ad = tmp_path / "adapters"
    ad.mkdir()
    (ad / "zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(ad / "fifo.yaml")
    for name, what in (("zero", "character device"), ("fifo", "FIFO")):
        refused(["inspect", f"adapter={name}", f"adapter_dir={ad}", f"source={base}"], what, seconds=5.0)
    record("bounds", "adapter_dir/x.yaml -> /dev/zero, a FIFO", "exit 2 at once")


def test_huge_config_json(base, tmp_path):
    """A 1 GB config.json (sparse: no disk) is refused after 16 MiB + 1 bytes, never copied."""
    src = clone(base, tmp_path)
    cfg = src / "config.json"
    with open(cfg, "r+b") as f:
        f.truncate(2**30)
    out = tmp_path / "o"
    refused(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}"], "larger than", seconds=5.0)
    assert not out.exists()
    record("bounds", "1 GB config.json", "exit 2 after reading 16 MiB, nothing written")


CONFIG_ATTACKS = {
    "deep nesting": lambda c: "DEEP",
    "zero heads": lambda c: _tc(c, "num_attention_heads", 0),
    "string heads": lambda c: _tc(c, "num_attention_heads", "4"),
    "zero kv heads": lambda c: _tc(c, "num_key_value_heads", 0),
    "list hidden size": lambda c: _tc(c, "hidden_size", [128]),
    "object vocab": lambda c: _tc(c, "vocab_size", {"a": 1}),
    "5000-digit integer": lambda c: "HUGEINT",
    "Infinity": lambda c: "INF",
}


def _tc(c, k, v):
    c["text_config"][k] = v
    return c


@pytest.mark.parametrize("attack", sorted(CONFIG_ATTACKS))
def test_config_attacks(attack, base, tmp_path):
    src = clone(base, tmp_path)
    cfg = json.loads((src / "config.json").read_text())
    new = CONFIG_ATTACKS[attack](cfg)
    text = json.dumps(cfg)
    if new == "DEEP":
        text = text[:-1] + ', "zz": ' + "[" * 100000 + "]" * 100000 + "}"
    elif new == "HUGEINT":
        text = text[:-1] + ', "zz": ' + "7" * 5000 + "}"
    elif new == "INF":
        text = text[:-1] + ', "zz": Infinity}'
    (src / "config.json").write_text(text)
    out = tmp_path / "o"
    refused(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}"], "config.json")
    assert not out.exists()
    record("bounds", f"config.json: {attack}", "exit 2, one line naming the file and key")


def test_config_nested_past_the_depth_limit_is_refused_by_the_depth_check(base, tmp_path):
    """A config.json nested 100 levels (parseable without recursion trouble) is refused by the
    64-level depth check, naming the file; 64 levels exactly still parse (the bound is inclusive)."""
    from draftsmith.framework.io.safe_read import MAX_JSON_DEPTH, parse_json

    src = clone(base, tmp_path)
    cfg = json.loads((src / "config.json").read_text())
    text = json.dumps(cfg)[:-1] + ', "zz": ' + "[" * 99 + "]" * 99 + "}"  # 1 + 99 = 100 levels
    (src / "config.json").write_text(text)
    out = tmp_path / "o"
    refused(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}"],
            "config.json", f"nested deeper than {MAX_JSON_DEPTH} levels")
    assert not out.exists()
    assert parse_json(("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH).encode(), Path("x.json")) is not None
    record("bounds", "config.json nested 100 levels", "exit 2, refused by the depth check")


def test_index_deep_nesting_and_escape(base, tmp_path):
    src = clone(base, tmp_path)
    idx = src / "model.safetensors.index.json"
    idx.write_text('{"weight_map": ' + "[" * 100000 + "]" * 100000 + "}")
    refused(["inspect", "adapter=minimax_dspark", f"source={src}"], str(idx))
    idx.write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    refused(["inspect", "adapter=minimax_dspark", f"source={src}"], "not a file name in this folder")
    record("bounds", "index: deep nesting; shard ../x.safetensors", "exit 2, one line")


INDEX = "model.safetensors.index.json"


def _wm(src: Path) -> dict[str, str]:
    """A valid weight_map for the single-shard source: every tensor in model.safetensors."""
    f = src / "model.safetensors"
    n = int.from_bytes(f.read_bytes()[:8], "little")
    return {k: "model.safetensors" for k in json.loads(f.read_bytes()[8:8 + n]) if k != "__metadata__"}


def _with_meta(wm, meta_json: str) -> str:
    return '{"metadata": ' + meta_json + ', "weight_map": ' + json.dumps(wm) + "}"


#: model.safetensors.index.json attacks (the index of a source; draft's converted index:
#: tests/hostile/test_hostile_draft.py): name -> index text from a valid weight_map
INDEX_ATTACKS = {
    "5000-digit integer (total_size)": lambda wm: _with_meta(wm, '{"total_size": ' + "9" * 5000 + "}"),
    "5000-digit integer (shard name)": lambda wm: json.dumps({"weight_map": wm})[:-2] + ', "zz": ' + "9" * 5000 + "}}",
    "deep nesting (metadata)": lambda wm: _with_meta(wm, "[" * 100000 + "]" * 100000),
    "deep nesting (weight_map)": lambda wm: '{"weight_map": ' + "[" * 100000 + "]" * 100000 + "}",
    "Infinity total_size": lambda wm: _with_meta(wm, '{"total_size": Infinity}'),
    "1e400 total_size": lambda wm: _with_meta(wm, '{"total_size": 1e400}'),
    "NaN total_size": lambda wm: _with_meta(wm, '{"total_size": NaN}'),
    "string total_size": lambda wm: _with_meta(wm, '{"total_size": "123"}'),
    "negative total_size": lambda wm: _with_meta(wm, '{"total_size": -3}'),
    "fractional total_size": lambda wm: _with_meta(wm, '{"total_size": 2.5}'),
    "metadata a list": lambda wm: _with_meta(wm, "[1]"),
    "weight_map a list": lambda wm: json.dumps({"weight_map": list(wm)}),
    "weight_map empty": lambda wm: json.dumps({"metadata": {}, "weight_map": {}}),
    "shard name an integer": lambda wm: json.dumps({"weight_map": {**wm, next(iter(wm)): 3}}),
    "shard name null": lambda wm: json.dumps({"weight_map": {**wm, next(iter(wm)): None}}),
    "top level a list": lambda wm: json.dumps([wm]),
    "a tensor of the shard not listed": lambda wm: json.dumps({"weight_map": dict(list(wm.items())[1:])}),
    "not UTF-8": lambda wm: b'{"weight_map": {"\xff": 1}}',
}


@pytest.mark.parametrize("attack", sorted(INDEX_ATTACKS))
@pytest.mark.parametrize("command", ["inspect", "convert"])
def test_index_attacks(attack, command, base, tmp_path):
    """Each: one ``error:`` line naming the index, exit 2, no traceback, nothing written."""
    src = clone(base, tmp_path)
    text = INDEX_ATTACKS[attack](_wm(src))
    idx = src / INDEX
    idx.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "o"
    args = [command, "adapter=minimax_dspark", f"source={src}"] + ([f"out={out}"] if command == "convert" else [])
    err = refused(args, str(idx), seconds=5.0)
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    record("bounds", f"index: {attack} ({command})", "exit 2, one line naming the index")


@pytest.mark.parametrize("meta", ['{"total_size": 0}', '{"total_size": 16060522496.0}', "{}"])
def test_index_total_size_not_used(meta, base, tmp_path):
    """The control: ``total_size`` is not used (writers differ in what they count), so a zero,
    a float-spelt whole number or none at all converts like the checkpoint without an index."""
    src = clone(base, tmp_path)
    (src / INDEX).write_text(_with_meta(_wm(src), meta))
    rc, out, err, _ = run(["convert", "adapter=minimax_dspark", f"source={src}", f"out={tmp_path / 'o'}", "progress=false"])
    assert rc == 0, err
    record("bounds", f"index: total_size {meta} (not used)", "accepted, converts")


def test_spec_nested_80_levels(base, tmp_path):
    ad = tmp_path / "adapters"
    ad.mkdir()
    text = (Path(__file__).resolve().parents[2] / "adapters" / "minimax_dspark.yaml").read_text()
    text = text.replace("name: minimax_dspark", "name: deep", 1) + "extra: " + "[" * 80 + "]" * 80 + "\n"
    (ad / "deep.yaml").write_text(text)
    refused(["inspect", "adapter=deep", f"adapter_dir={ad}", f"source={base}"], "deep.yaml")
    record("bounds", "spec nested 80 levels", "exit 2, one line")


def test_unwritable_destinations(base, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    afile = tmp_path / "afile"
    afile.write_text("x")
    try:
        for out in (ro / "sub" / "o", ro / "o", afile / "o"):
            if os.geteuid() == 0 and ro in out.parents:
                continue  # root writes anywhere: only the file-as-parent case applies
            refused(["convert", "adapter=minimax_dspark", f"source={base}", f"out={out}"], str(out.parent))
    finally:
        ro.chmod(0o700)
    record("bounds", "read-only parent / a parent that is a file", "exit 2, one line")


ULIMIT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
import draftsmith.framework.cli.main as m
sys.exit(m.main(sys.argv[1:]))
"""


def test_ulimit_f(base, tmp_path):
    import subprocess

    out = tmp_path / "o"
    p = subprocess.run([sys.executable, "-c", ULIMIT, "convert", "adapter=minimax_dspark", f"source={base}",
                        f"out={out}"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3])))
    assert p.returncode == 2, (p.returncode, p.stderr[-1500:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "File too large" in lines[0], p.stderr[-1500:]
    assert sorted(x.name for x in tmp_path.iterdir()) == [], list(tmp_path.iterdir())
    record("bounds", "ulimit -f during convert", "exit 2, one line, nothing left")


def test_400k_element_yaml_list_refused_fast(base, tmp_path):
    ad = tmp_path / "adapters"
    ad.mkdir()
    (ad / "big.yaml").write_text("name: big\nextra: [" + ",".join(["1"] * 400_000) + "]\n")
    refused(["inspect", "adapter=big", f"adapter_dir={ad}", f"source={base}"], "more than", seconds=6.0)
    record("bounds", "400 000-element YAML list", "exit 2 in seconds")


def test_broken_adapter_does_not_break_routing(base, tmp_path):
    """Routing (no adapter=) skips an unreadable file in adapter_dir; it is named only when
    no adapter serves the checkpoint."""
    ad = tmp_path / "adapters"
    ad.mkdir()
    (ad / "aaa_broken.yaml").write_text("name: [unclosed\n")
    os.mkfifo(ad / "bbb_fifo.yaml")
    rc, out, err, dt = run(["inspect", f"adapter_dir={ad}", f"source={base}"])
    assert rc == 0, err
    src = clone(base, tmp_path)
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"] = ["NobodyServesThis"]
    (src / "config.json").write_text(json.dumps(cfg))
    refused(["inspect", f"adapter_dir={ad}", f"source={src}"], "no adapter serves", "aaa_broken.yaml", "FIFO")
    record("bounds", "broken file / FIFO in adapter_dir while routing", "skipped; named when nothing matches")
