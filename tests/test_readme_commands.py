"""The command list of the documentation (docs/reference/cli.md, "At a glance"; README's before the docs site)
is checked against the command line itself (issue 28, item 7): every command ``proxima --help`` lists is in it,
every command in it exists, and every option it shows is one that command takes. A command added without a
line there, or an option renamed, fails here."""
from __future__ import annotations

import re
from pathlib import Path

import click

from webapp.cli import main

README = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")


def documented() -> dict[str, set[str]]:
    """Command name -> the options the "At a glance" block of the command-line page shows for it."""
    block = re.search(r"## At a glance\n\n```\n(.*?)```", README, re.S).group(1)
    out: dict[str, set[str]] = {}
    current = None
    for line in block.splitlines():
        for part in re.split(r" / (?=proxima )", line.split("#")[0]):
            found = re.match(r"\s*proxima ([a-z-]+)", part)
            if found:
                current = found.group(1)
                out.setdefault(current, set())
            if current is not None:
                out[current] |= set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", part))
    return out


def options(command: click.Command) -> set[str]:
    names = {opt for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= options(sub)
    return names | {"-h", "--help"}


def test_every_command_is_in_the_readme_and_every_readme_command_exists():
    listed = documented()
    missing = sorted(set(main.commands) - set(listed))
    unknown = sorted(set(listed) - set(main.commands))
    assert not missing, f"commands missing from docs/reference/cli.md's list: {missing}"
    assert not unknown, f"docs/reference/cli.md lists commands proxima does not have: {unknown}"


def test_every_option_the_readme_shows_is_one_the_command_takes():
    wrong = {name: sorted(shown - options(main.commands[name])) for name, shown in documented().items()}
    assert not {k: v for k, v in wrong.items() if v}, wrong


def test_the_checker_sees_a_missing_command_and_a_wrong_option(monkeypatch):
    global README
    original = README
    try:
        README = original.replace("proxima sweep [--interval S]", "proxima sweep [--intervals S]")
        assert documented()["sweep"] == {"--intervals"}
        README = original.replace("proxima studies\n", "")
        assert "studies" not in documented()
    finally:
        README = original
