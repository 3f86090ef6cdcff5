"""``Parser``: the command line's argument parser, which answers a mistyped command or option
with the closest one ("did you mean 'list'?"), as git and kubectl do."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterator
from typing import NoReturn

__all__ = ["Parser", "suggestion"]

_CHOICE = re.compile(r"invalid choice: '?([^'\s]+)'? \(choose from (.*)\)")
_UNKNOWN = re.compile(r"unrecognized arguments: (.*)")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors suggest the closest command or option; the parsers of
    its subcommands are made of the same class."""

    def error(self, message: str) -> NoReturn:
        """Print usage and ``message`` (with a suggestion when one is close) and exit 2."""
        super().error(message + suggestion(self, message))


def suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """``"; did you mean 'X'?"`` for the word of ``message`` (an argparse error) closest to a
    command or option of ``parser`` and its subcommands; empty when none is close."""
    choice = _CHOICE.search(message)
    if choice:
        wrong = choice.group(1)
        known = re.findall(r"[\w.-]+", choice.group(2))
    else:
        unknown = _UNKNOWN.search(message)
        wrong = next((w for w in (unknown.group(1).split() if unknown else ()) if w[:1] == "-"), "")
        known = sorted(set(_options(parser)))
    close = difflib.get_close_matches(wrong, known, n=1, cutoff=0.6) if wrong else []
    return f"; did you mean '{close[0]}'?" if close else ""


def _options(parser: argparse.ArgumentParser) -> Iterator[str]:
    """Every option string of ``parser`` and of its subcommands' parsers."""
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its actions only here
        yield from (s for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                yield from _options(sub)
