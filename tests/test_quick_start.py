"""The README's quick start: two one-line commands, and CI runs the test one verbatim."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Quick start") if "## Quick start" in text else 0
    following = re.search(r"^## ", text[start + 1:], flags=re.M)
    end = start + 1 + following.start() if following else len(text)
    blocks = re.findall(r"```bash\n(.*?)```", text[start:end], flags=re.S)
    return [line for block in blocks for line in block.strip().splitlines()]


def test_the_quick_start_is_two_one_line_commands_and_ci_runs_the_test_one():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    serve, test = commands
    assert "proxima serve --demo" in serve
    assert "ruff check ." in test and "pytest" in test  # lint first: a lint error fails the run
    assert test in (ROOT / ".ci" / "run").read_text()
