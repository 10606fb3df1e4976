"""Point 4 (raw checkpoints): pointing ``speculative_model`` at the unconverted checkpoint either
drafts correctly or is refused in one line that prints the ``draftsmith convert`` command; the
pinned version's drafter path honours no config-loader registration (CONTRACT.md R4)."""

from harness import assert_matches_oracle, one_line


def test_raw_checkpoint_is_served_correctly_or_refused_with_the_convert_command(case):
    out = case.drive("serve", checkpoint=case.source)["backends"]["VANILLA"]
    failure = next((out[k] for k in ("build", "load", "decode") if isinstance(out.get(k), dict)), None)
    if failure is None:
        assert_matches_oracle(case, out, "raw checkpoint")
        return
    msg = failure["message"]
    assert "draftsmith convert" in msg and f"adapter={case.adapter}" in msg and one_line(msg), (
        f"{case.adapter}: a raw checkpoint must be refused in one line printing "
        f"`draftsmith convert adapter={case.adapter} source=... out=...`; got {failure['error']}")
