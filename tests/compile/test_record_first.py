"""Compilation is record-first: the record compile hands in-process consumers is the one
the converted config carries, and only readers of a config on disk re-parse it."""

import ast
from pathlib import Path

import pytest

from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.convert.synth import source_config
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.converted_config import compile_config
from draftsmith.framework.spec.loading import adapter_files


@pytest.mark.parametrize("name", sorted(adapter_files()))
def test_compiled_record_is_the_one_the_config_carries(name):
    a = load_adapter(name)
    flat, record = compile_config(a, source_config(a, "tiny"))
    assert record == ResolvedDrafter.from_config(flat)
    assert flat["draftsmith"] == record.section()



ROOT = Path(__file__).resolve().parents[2]
#: (product file, function) that parse a converted config.json read from disk: the only
#: ``from_config`` callers in the product
DISK_READERS = {
    ("framework/compile/read_back.py", "read_converted"),  # draft, eval, emit config=: checked against its keys
    ("framework/emit/binding.py", "bind"),  # inside TensorRT-LLM: the config object transformers built
    ("framework/emit/render.py", "_emission_config"),  # a spec's synth.config that is a converted one
}


def _from_config_callers() -> set[tuple[str, str]]:
    found = set()
    for path in sorted((ROOT / "framework").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_config":
                    found.add((str(path.relative_to(ROOT)), fn.name))
    return found


def test_from_config_is_called_only_on_configs_read_from_disk():
    callers = _from_config_callers()
    assert callers and callers <= DISK_READERS, sorted(callers - DISK_READERS)


@pytest.mark.parametrize("key, value, words", [
    ("num_key_value_heads", 3, ("num_attention_heads", "is not a multiple of num_key_value_heads")),
    ("rotary_dim", 3, ("rotary_dim 3", "even", "head_dim")),
    ("mask_token_id", 1 << 23, (f"mask_token_id {1 << 23}", "must be < vocab_size")),
])
def test_a_record_rule_refuses_in_one_line_naming_its_keys(key, value, words):
    """Heads dividing, rotary_dim and the mask id inside the vocab are checked once, by the
    record; its refusal names the keys."""
    from draftsmith.framework.errors import UserError

    a = load_adapter("speculators_dflash")
    raw = source_config(a, "tiny")
    sections = [raw] + [v for v in raw.values() if isinstance(v, dict)]
    hit = [s for s in sections if key in s]
    (hit[0] if hit else raw)[key] = value
    with pytest.raises(UserError) as e:
        compile_config(a, raw)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


@pytest.mark.parametrize("field, value, words", [
    ("dims.rotary_dim", 3, ("rotary_dim 3", "even", "head_dim")),
    ("mask_token_id", 1 << 23, (f"mask_token_id {1 << 23}", "must be < vocab_size")),
])
def test_a_record_rule_refuses_a_converted_config_too(field, value, words):
    """The record's rules hold for a config read from disk (``from_config``): the torch host's
    rope and the config checks do not repeat them, so the record is their one place."""
    from draftsmith.framework.errors import UserError

    a = load_adapter("speculators_dflash")
    flat, record = compile_config(a, source_config(a, "tiny"))
    section = record.section()
    *path, last = field.split(".")
    node = section
    for part in path:
        node = node[part]
    node[last] = value
    with pytest.raises(UserError) as e:
        ResolvedDrafter.from_config(dict(flat, draftsmith=section))
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg
