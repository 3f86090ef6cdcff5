"""The repository speaks for itself: no file refers to a document that is not in it, and
every rule id a file cites (``# L7``, "K4", "D2") is defined in docs/rules.md, as is every
benchmark id in docs/benchmarks.md."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from .examples import ROOT

SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache",
             "build", "dist", ".ipynb_checkpoints", "leasekit-warehouse"}  # fmt: skip
TEXT = {".py", ".md", ".ipynb", ".yml", ".yaml", ".toml", ".cfg", ".txt", ".sh", ".json", ""}

OUTSIDE = re.compile(
    "|".join(
        [
            r"\bDESIGN\b",  # a product spec kept elsewhere
            r"shared folder",
            r"\.\./shared\b",
            r"§\s*\d",  # its section numbers
            r"\bSTYLE\b|house style",  # a style guide kept elsewhere
        ]
    )
)
RULE = re.compile(r"(?<![\w/.#-])([WSLCRKDM])(\d{1,2})(?![\w.]*\()(?![\w-])")
NOT_RULES = {"S3", "C0"}
"""Look like rule ids but are not: Amazon S3; a consumer named C0 in an assignor example."""
BENCH = re.compile(r"(?<![\w/-])(B\d{1,2}(?:-[A-Z0-9]+(?:-[a-z]+)?)?)(?![\w])")


def files() -> Iterator[Path]:
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts):
            continue
        if path.is_file() and path.suffix in TEXT and path.stat().st_size < 2_000_000:
            yield path


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        return ""


def test_no_file_refers_to_a_document_outside_the_repository() -> None:
    me = Path(__file__)
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
        for path in files()
        if path != me
        for n, line in enumerate(_text(path).splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, f"{len(found)} references:\n" + "\n".join(found[:60])


def defined(page: str, pattern: str) -> set[str]:
    return set(re.findall(pattern, (ROOT / "docs" / page).read_text(), re.M))


def test_every_rule_id_used_is_defined_in_the_docs() -> None:
    rules = defined("rules.md", r"^- \*\*([WSLCRKDM]\d{1,2})\*\*")
    assert {"W1", "L15", "C17", "R8", "K8", "D5", "M6"} <= rules
    undefined = {}
    for path in files():
        for n, line in enumerate(_text(path).splitlines(), 1):
            for letter, number in RULE.findall(line):
                rule = f"{letter}{number}"
                if rule not in rules and rule not in NOT_RULES:
                    undefined.setdefault(rule, f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not undefined, "\n".join(f"{k}: {v[:140]}" for k, v in sorted(undefined.items()))


def test_every_rule_is_defined_once() -> None:
    text = (ROOT / "docs" / "rules.md").read_text()
    ids = re.findall(r"^- \*\*([WSLCRKDM]\d{1,2})\*\*", text, re.M)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_every_benchmark_id_used_is_defined_in_the_docs() -> None:
    marks = defined("benchmarks.md", r"\|\s*(B\d{1,2}(?:-[A-Za-z0-9-]+)?)\s*\|")
    marks |= defined("benchmarks.md", r"\*\*(B\d{1,2}(?:-[A-Za-z0-9-]+)?)\*\*")
    undefined = {}
    for path in files():
        for n, line in enumerate(_text(path).splitlines(), 1):
            for mark in BENCH.findall(line):
                if mark not in marks and mark.split("-")[0] not in marks:
                    undefined.setdefault(mark, f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not undefined, "\n".join(f"{k}: {v[:140]}" for k, v in sorted(undefined.items()))
