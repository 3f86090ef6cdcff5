"""The examples of a Markdown page, in the order a reader meets them: every ```python block
and every ``leasekit ...`` line of a shell block (```bash, ```sh, ```console, ```shell).

A block that is not meant to run says so on the line just before its opening fence:
``<!-- not run: <reason> -->``. A shell line expects exit status 0 unless its comment says
otherwise (``leasekit lease drop nope  # exits 2``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

__all__ = ["Example", "examples", "pages", "NOT_RUN", "SHELLS"]

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->")
SHELLS = ("bash", "sh", "shell", "console")
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
_EXIT = re.compile(r"#.*\bexits? (?:with )?(?:status )?(?P<code>\d+)")


class Example(NamedTuple):
    """One thing to run: Python code, or one shell command line."""

    kind: str
    """"python" or "shell"."""
    code: str
    """The block's code, or the command line without its prompt."""
    line: int
    """Line number (1-based) of the block's first line or of the command in its page."""
    exit_code: int = 0
    """The exit status a shell line expects."""


class Block(NamedTuple):
    info: str
    body: list[str]
    first: int
    """Line number of the block's first body line."""
    skipped: str | None
    """The reason given by a ``not run`` marker, else None."""


def pages() -> list[Path]:
    """README.md and every page of docs/, in reading order (README first, then by name)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown text, with the marker line before it."""
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence = match.group("fence")
        before = lines[i - 1] if i else ""
        marker = NOT_RUN.search(before)
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        out.append(
            Block(
                match.group("info").lower(),
                lines[i + 1 : end],
                i + 2,
                marker.group("reason") if marker else None,
            )
        )
        i = end + 1
    return out


def examples(text: str) -> list[Example]:
    """The runnable examples of a page, in order."""
    out: list[Example] = []
    for block in blocks(text):
        if block.skipped is not None:
            continue
        if block.info in ("python", "py", "python3"):
            out.append(Example("python", "\n".join(block.body) + "\n", block.first))
        elif block.info in SHELLS:
            for n, raw in enumerate(block.body):
                line = raw.strip()
                if line.startswith("$ "):
                    line = line[2:].lstrip()
                if line.startswith("leasekit "):
                    wanted = _EXIT.search(line)
                    code = int(wanted.group("code")) if wanted else 0
                    out.append(Example("shell", line, block.first + n, code))
    return out
