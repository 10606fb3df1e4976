"""Issue 37 point 3: ``draft dump=`` with a target that ties its embeddings (no
``lm_head.weight``; the head shares the embedding's storage) writes the dump instead of
ending in safetensors' shared-memory error, and the dumped step is the reference's."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file, save_file

from support.oracles import draft_oracle
from support.host_case import assert_matches, make_config, make_target, make_weights, write_checkpoint


def test_dump_with_tied_target(tmp_path):
    from draftsmith.framework.runtime.draft import run_draft

    config = make_config()
    weights, target = make_weights(config), make_target()
    ck, tg = write_checkpoint(tmp_path, config, weights, target)
    embed = target["model.embed_tokens.weight"]
    save_file({"model.embed_tokens.weight": embed}, str(tg / "model.safetensors"))  # tied: no lm_head.weight
    (tg / "config.json").write_text(json.dumps({**json.loads((tg / "config.json").read_text()),
                                                "tie_word_embeddings": True}))
    dump = tmp_path / "step.safetensors"
    rep = run_draft(ck, tg, context=11, seed=3, dump=dump)
    assert rep.dump == str(dump)
    d = load_file(str(dump))
    assert torch.equal(d["target.lm_head"], embed) and torch.equal(d["target.embed_tokens"], embed)
    ref = draft_oracle(config, weights, {"model.embed_tokens.weight": embed, "lm_head.weight": embed},
                       d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    assert_matches(d["outputs.logits"], d["outputs.tokens"], d["outputs.confidence"], ref)
