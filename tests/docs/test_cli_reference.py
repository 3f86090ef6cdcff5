"""docs/cli.md is the CLI reference: every command of the parser has a ``### leasekit ...``
heading, and every option of that command is spelled in its section; the reference names no
command or option the parser does not have."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from leasekit.cli import build_parser

from .examples import ROOT

CLI_MD = ROOT / "docs" / "cli.md"


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("leasekit",)
) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """(command words, its option strings) for the parser and every subcommand under it."""
    options = [o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")]
    yield path, options
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def sections() -> dict[str, str]:
    """Each ``### leasekit ...`` heading of docs/cli.md with the text under it."""
    text = CLI_MD.read_text()
    parts = re.split(r"^### (leasekit[^\n]*)\n", text, flags=re.M)
    return {head.strip(): body for head, body in zip(parts[1::2], parts[2::2])}


def test_every_command_and_option_is_in_the_reference() -> None:
    found = sections()
    missing = []
    for path, options in commands(build_parser()):
        head = " ".join(path)
        if head not in found:
            missing.append(f"no section '### {head}'")
            continue
        missing += [f"{head}: {o}" for o in options if not re.search(rf"{o}\b", found[head])]
    assert not missing, "\n".join(missing)


def test_the_reference_names_only_real_commands_and_options() -> None:
    known = {" ".join(path): options for path, options in commands(build_parser())}
    unknown = [head for head in sections() if head not in known]
    assert not unknown, unknown
    for head, body in sections().items():
        own = set(known[head])
        # every --option the section's synopsis shows exists on that command or a global one
        synopsis = re.findall(r"```text\n(.*?)```", body, re.S)
        shown = {o for block in synopsis for o in re.findall(r"(--[a-z][a-z0-9-]*)", block)}
        globals_ = set(known["leasekit"])
        assert shown <= own | globals_, (head, sorted(shown - own - globals_))
