"""Issue 34 point 4: the emitted ``speculative_config`` snippet is accepted by TensorRT-LLM's own
decoding-config model (excerpt: NVIDIA llm_args.py @ 00043967 ``DFlashDecodingConfig`` /
``DSparkDecodingConfig`` on the verbatim ``StrictBaseModel``, ``extra="forbid"``; the class the
snippet's ``decoding_type`` names, as ``DecodingBaseConfig.from_dict`` dispatches), and what the
model then holds drives the excerpted worker to the trained block width and slots."""

import pytest
import yaml

import excerpts


@pytest.fixture(scope="module")
def models():
    excerpts.require()
    ld = excerpts.loader()
    return ld, ld.llm_args(), ld.worker()


def _snippet(case):
    snip = yaml.safe_load((case.package() / "speculative_config.yaml").read_text())["speculative_config"]
    return {**snip, "speculative_model": str(case.converted)}


def test_snippet_validates_in_the_pinned_decoding_config(case, models):
    _, la, _ = models
    snip = _snippet(case)
    cls = la.get(f"{snip['decoding_type']}DecodingConfig")
    assert cls is not None, f"{case.adapter}: decoding_type {snip['decoding_type']!r} has no decoding config"
    want = "DFlash" if case.is_dflash else "DSpark"
    assert snip["decoding_type"] == want, f"{case.adapter}: decoding_type {snip['decoding_type']}, want {want}"
    try:
        spec = cls(**snip)
    except Exception as e:  # pydantic.ValidationError: the refusal TensorRT-LLM gives
        pytest.fail(f"{case.adapter}: TensorRT-LLM's {cls.__name__} refuses the emitted snippet: "
                    f"{str(e).splitlines()[0]} ... {' '.join(str(e).split())[-300:]}")
    assert spec.max_draft_len == case.config["draftsmith"]["max_draft_len"]
    assert spec.max_total_draft_tokens == spec.max_draft_len  # the model's own validator


def test_snippet_backend_values_are_the_pinned_ones(case, models):
    """Every ``attention_backend`` the docs/snippet offer must be a literal of the pinned field."""
    _, la, _ = models
    snip = _snippet(case)
    cls = la[f"{snip['decoding_type']}DecodingConfig"]
    allowed = cls.model_fields["attention_backend"].annotation.__args__
    assert snip["attention_backend"] in allowed, f"{case.adapter}: {snip['attention_backend']} not in {allowed}"
