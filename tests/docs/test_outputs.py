"""Documented commands leave nothing in the repository: every papermill command of README.md
and docs/ writes its notebook outside the checkout and runs in a working directory given with
``--cwd`` (where the job's own relative outputs land), and .gitignore covers what the
notebooks and tests may leave where they run."""

from __future__ import annotations

import re
import shlex

from .examples import ROOT, SHELLS, blocks, pages


def papermill_commands() -> list[tuple[str, list[str]]]:
    out = []
    for page in pages():
        for block in blocks(page.read_text()):
            if block.info not in SHELLS:
                continue
            text = "\n".join(block.body).replace("\\\n", " ")
            for line in text.splitlines():
                for command in line.split(";"):
                    words = shlex.split(command, comments=True)
                    if words and words[0].endswith("papermill"):
                        out.append((f"{page.relative_to(ROOT)}: {command.strip()[:80]}", words))
    return out


def test_papermill_commands_write_outside_the_repository() -> None:
    found = papermill_commands()
    assert len(found) >= 4
    for where, words in found:
        assert "--cwd" in words, where
        cwd = words[words.index("--cwd") + 1]
        output = words[2]
        for path in (cwd, output):
            assert re.match(r"[$~/]", path), f"{where}: {path} is inside the checkout"


def test_gitignore_covers_what_jobs_and_tests_leave() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    for entry in (
        "leasekit-warehouse/",
        ".ipynb_checkpoints/",
        "/streaming_pipeline_checkpoint/",
        "/counts.parquet/",
        "/lag_report.csv",
    ):
        assert any(line.strip() == entry for line in ignored), entry
