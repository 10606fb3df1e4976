"""A math-bearing config value of the wrong JSON type is refused in one line naming the key as
``config.json`` spells it, never coerced: a number written as a string (``"1.702"``) would be
copied into the converted config as a string, and a switch written as ``"false"`` or ``1`` reads
as true to every reader that tests its truth (transformers' and TensorRT-LLM's ``if
config.use_sliding_window:``) while a coercing check would have read it as false. The record
read back from a converted config is as strict."""

from __future__ import annotations

import copy
import json

import pytest

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.converted_config import compile_config
from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.convert.synth import source_config, synthesize
from draftsmith.framework.errors import UserError
from draftsmith.framework.spec.loading import adapter_files

#: (adapter, raw key path in its config.json, wrong value, words of the refusal)
BAD = [
    ("minimax_dspark", "text_config.swiglu_alpha", "1.702", "must be a finite number > 0"),
    ("minimax_dspark", "text_config.swiglu_limit", "7.0", "must be a finite number > 0"),
    ("minimax_dspark", "text_config.swiglu_limit", -7.0, "must be a finite number > 0"),
    ("minimax_dspark", "text_config.swiglu_alpha", True, "must be a finite number > 0"),
    ("minimax_dspark", "text_config.enable_confidence_head", 1, "must be true or false"),
    ("minimax_dspark", "text_config.confidence_head_with_markov", "false", "must be true or false"),
    ("speculators_dspark", "sample_from_anchor", "false", "must be true or false"),
    ("speculators_dspark", "sample_from_anchor", 1, "must be true or false"),
    ("speculators_dspark", "sliding_window_non_causal", "false", "must be true or false"),
    ("speculators_dflash", "transformer_layer_config.use_sliding_window", 1, "must be true or false"),
    ("zlab_dflash2", "is_causal", "true", "must be true or false"),
    ("zlab_dflash2", "use_sliding_window", "false", "must be true or false"),
    ("deepseek_dspark_dense", "use_sliding_window", 0, "must be true or false"),
    ("trtllm_dflash", "dflash_config.use_swa", "false", "must be true or false"),
    ("zlab_dflash", "dspark_config.shift_label", "false", "must be true or false"),
]


def _set(raw: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for part in path:
        raw = raw.setdefault(part, {})
    raw[last] = value


@pytest.mark.parametrize("name,key,value,words", BAD, ids=[f"{n}-{k}-{v!r}" for n, k, v, _ in BAD])
def test_a_wrong_type_is_refused_naming_the_raw_key(name, key, value, words):
    a = load_adapter(name)
    raw = source_config(a, "tiny")
    compile_config(a, raw)  # the unedited config compiles
    _set(raw, key, value)
    with pytest.raises(UserError) as e:
        compile_config(a, raw)
    msg = str(e.value)
    assert "\n" not in msg and f"{key}: {value!r}" in msg and words in msg, msg


#: (field of the converted config's ``draftsmith`` section, wrong value)
TAMPERED = [("mlp.alpha", "1.702"), ("mlp.limit", -7.0), ("heads.confidence", "false"),
            ("heads.confidence_with_markov", 0), ("sample_from_anchor", 1), ("attention_bias", "false"),
            ("qk_norm", 1), ("layers.0.mask.causal", "false")]


@pytest.mark.parametrize("field,value", TAMPERED, ids=[f for f, _ in TAMPERED])
def test_a_converted_config_with_a_wrong_type_is_refused(field, value):
    a = load_adapter("minimax_dspark")
    flat, record = compile_config(a, source_config(a, "tiny"))
    section = record.section()
    *path, last = field.split(".")
    node = section
    for part in path:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[last] = value
    with pytest.raises(UserError) as e:
        ResolvedDrafter.from_config(dict(flat, draftsmith=section))
    msg = str(e.value)
    assert "\n" not in msg and (last in msg or field in msg), msg


def test_convert_refuses_a_string_number_writing_nothing(tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    synthesize(load_adapter("minimax_dspark"), "tiny", src, seed=0)
    raw = json.loads((src / "config.json").read_text())
    _set(raw, "text_config.swiglu_alpha", "1.702")
    (src / "config.json").write_text(json.dumps(raw))
    assert main(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}", "progress=false"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "text_config.swiglu_alpha: '1.702' must be a finite number > 0" in err[0], err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"]


@pytest.mark.parametrize("key,value", [("max_position_embeddings", "40960"), ("max_position_embeddings", 0),
                                       ("num_target_layers", 8.5)])
def test_a_carried_key_of_the_wrong_type_is_refused(key, value):
    """Keys no forward here reads but converted configs and exports carry to readers that compute
    with them (TensorRT-LLM: ``min(max_seq_len, max_position_embeddings)``) are typed too."""
    a = load_adapter("zlab_dflash")
    raw = source_config(a, "tiny")
    assert key in raw
    raw[key] = value
    with pytest.raises(UserError, match=f"{key}: {value!r} must be an integer >= 1"):
        compile_config(a, raw)


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, (*path, i))
    else:
        yield path, node


def _retyped(v) -> list:
    """The value in other JSON types a careless writer uses: a switch as a string or 0/1, a number
    as a string, an integer as a float of the same value."""
    if isinstance(v, bool):
        return [str(v).lower(), str(not v).lower(), int(v)]
    if isinstance(v, (int, float)):
        return [str(v)] + ([float(v)] if isinstance(v, int) else [])
    return []


def _typed(node):
    """``node`` with every leaf tagged by its kind (switch, number, string), numbers as floats."""
    if isinstance(node, dict):
        return {k: _typed(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_typed(v) for v in node]
    if isinstance(node, bool):
        return ("switch", node)
    if isinstance(node, (int, float)):
        return ("number", float(node))
    return ("other", node)


@pytest.mark.parametrize("name", sorted(adapter_files()))
def test_a_retyped_value_is_refused_or_changes_nothing(name):
    """Every switch and number of each shipped adapter's synthesized config, retyped: the compile
    refuses it in one line, or the record and the converted config (what readers get) are the
    unedited config's, types included, but for keys the spec or family declare irrelevant or
    writer-ignored (data that changes nothing, by declaration)."""
    a = load_adapter(name)
    raw = source_config(a, "tiny")
    flat0, record0 = compile_config(a, copy.deepcopy(raw))
    for path, value in _leaves(raw):
        for bad in _retyped(value):
            edited = copy.deepcopy(raw)
            node = edited
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = bad
            try:
                flat, record = compile_config(a, edited)
            except UserError as e:
                assert "\n" not in str(e), str(e)
                continue
            declared = set(record.irrelevant) | set(record.writer_ignored)
            keep = lambda f: _typed({k: v for k, v in f.items() if k not in declared})  # noqa: E731
            where = ".".join(map(str, path))
            assert record == record0, f"{name}: {where} = {bad!r} compiled to another record"
            assert keep(flat) == keep(flat0), f"{name}: {where} = {bad!r} reaches the converted config retyped"
