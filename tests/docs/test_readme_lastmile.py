"""README.md tells a newcomer how long the full test run takes and gives one quick command for a
first check (issue 47 point 6): the command names test files that exist and that cover the spec,
conversion, a draft step and the emitted package."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_gives_the_full_run_time_and_a_quick_subset():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"full run takes about \d+ minutes on a 2-core machine", text)
    intro = re.search(r"For a first check, this subset takes\s+under (\d+) minutes", text)
    assert intro and int(intro.group(1)) <= 3
    block = re.search(r"^```bash\n(.*?)^```$", text[intro.end():], re.M | re.S).group(1)
    lines = [l for l in block.splitlines() if l.strip()]
    assert len(lines) == 1, lines  # one command
    words = shlex.split(lines[0])
    assert words[:3] == ["python", "-m", "pytest"]
    files = [w for w in words[3:] if not w.startswith("-")]
    assert files and all((ROOT / f).is_file() and re.fullmatch(r"tests/(\w+/)?test_\w+\.py", f) for f in files), files
    body = "".join((ROOT / f).read_text(encoding="utf-8") for f in files)
    # test_readme.py runs the README's commands: the quick subset reaches each stage through them
    commands = {w for line in text.splitlines() for w in re.findall(r"\bdraftsmith (\w+)", line)}
    assert "tests/docs/test_readme.py" in files and {"convert", "draft", "emit", "init"} <= commands
    assert "load_spec" in body and "emit" in body
