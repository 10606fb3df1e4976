"""``target=`` of ``draft`` and ``eval`` (issue 47 point 3): one resolver, the same forms (a
folder, a model root as downloaded, a repo id in the local Hugging Face cache), the model root
``checkpoint=`` names as the default target, and every error naming the argument."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from draftsmith.framework.cli.main import main
from draftsmith.framework.eval.target import resolve as eval_resolve
from draftsmith.framework.runtime.target_folder import target_folder
from support.helpers import one_error
from test_locate import hub_cache

ROOT = Path(__file__).resolve().parents[2]
PAIR = ROOT / "tests" / "fixtures" / "tiny_pair"


def copy_files(src: Path, dst: Path) -> Path:
    """The files of ``src`` (no subfolders) in ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copy(f, dst / f.name)
    return dst


def model_root(tmp_path: Path, target: Path, drafter: Path, name: str = "Model-Root") -> Path:
    """A model root as downloaded: the target's files at the root, the drafter in ``dspark/``."""
    root = copy_files(target, tmp_path / name)
    copy_files(drafter, root / "dspark")
    return root


def drafted(capsys, *args) -> list:
    """``draft ... format=json``'s tokens (exit 0 checked)."""
    rc = main(["draft", "device=cpu", "context=16", "format=json", "progress=false", *map(str, args)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return json.loads(cap.out.strip().splitlines()[-1])["tokens"]


def test_draft_takes_every_target_form(tmp_path, capsys, monkeypatch, checkpoints):
    """A folder, a model root and a cached repo id (with and without @revision) give the same
    draft; ``checkpoint=<model root>`` without ``target=`` drafts against the root."""
    ck = checkpoints("minimax_dspark")
    target = ck.source / "target"
    want = drafted(capsys, f"checkpoint={ck.converted}", f"target={target}")
    root = model_root(tmp_path, target, ck.source)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    hub_cache(tmp_path / "hub", "org/tiny-target", target, rev="c" * 40)
    for form in (root, "org/tiny-target", f"org/tiny-target@{'c' * 40}"):
        assert drafted(capsys, f"checkpoint={ck.converted}", f"target={form}") == want, form
    assert drafted(capsys, f"checkpoint={root}") == want  # converted on the way, the root as its target


@pytest.mark.parametrize("case", ["missing", "no_config", "converted", "drafter", "absent_repo", "no_default"])
def test_draft_target_errors_name_the_argument(case, tmp_path, capsys, monkeypatch, checkpoints):
    ck = checkpoints("minimax_dspark")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / "empty").mkdir()
    target = {"missing": tmp_path / "nope", "no_config": tmp_path / "empty", "converted": ck.converted,
              "drafter": ck.source, "absent_repo": "org/absent", "no_default": None}[case]
    args = [f"checkpoint={ck.converted}"] + ([f"target={target}"] if target is not None else [])
    assert main(["draft", "device=cpu", "context=16", *args]) == 2
    line = one_error(capsys)
    key = "target=" if target is not None else "missing target="
    assert key in line, line
    if target is not None:
        assert line.startswith(f"error: target={target}"), line


def test_eval_resolves_target_as_draft_does(tmp_path, monkeypatch, checkpoints):
    """``eval``'s target resolver is draft's: a repo id with @revision, a model root, and the
    refusal of a converted drafter."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snap = hub_cache(tmp_path / "hub", "tiny/byte-llama", PAIR / "target", rev="d" * 40)
    assert eval_resolve(f"tiny/byte-llama@{'d' * 40}") == snap == target_folder("tiny/byte-llama")
    root = model_root(tmp_path, PAIR / "target", PAIR / "dspark")
    assert eval_resolve(str(root)) == root
    from draftsmith.framework.errors import UserError

    with pytest.raises(UserError, match=r"^target=.*a drafter converted by"):
        eval_resolve(str(checkpoints("minimax_dspark").converted))


def test_eval_checkpoint_model_root_is_its_own_target(tmp_path, capsys):
    """``eval checkpoint=<model root>`` without ``target=``: the drafter from ``dspark/``, the root
    as the target; the same result as naming both."""
    root = model_root(tmp_path, PAIR / "target", PAIR / "dspark")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text((PAIR / "prompts.jsonl").read_text().splitlines()[0] + "\n")
    common = ["eval", "adapter=minimax_dspark", f"prompts={prompts}", "max_new_tokens=8", "format=json",
              "threads=1", "dtype=float32"]
    assert main([*common, f"checkpoint={PAIR / 'dspark'}", f"target={PAIR / 'target'}"]) == 0
    want = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*common, f"checkpoint={root}"]) == 0
    cap = capsys.readouterr()
    got = json.loads(cap.out.strip().splitlines()[-1])
    assert f"no target= given: using {root}" in cap.err
    assert got["mean_acceptance_length"] == want["mean_acceptance_length"]
