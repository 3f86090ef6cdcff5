"""The guide holds together: README.md stays an entry point (about 200 lines), and every
relative link of README.md and docs/ leads to a file of the repository and, with an anchor,
to a heading of that page."""

from __future__ import annotations

import re
from pathlib import Path

from .examples import ROOT, blocks, pages

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor a code host gives a heading: lower case, punctuation dropped, spaces as -."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _prose(path.read_text())
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def _prose(text: str) -> str:
    """The text outside fenced blocks."""
    for block in blocks(text):
        text = text.replace("\n".join(block.body), "")
    return text


def test_the_readme_is_an_entry_point() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines; the guide is docs/"
    assert "docs/README.md" in "\n".join(lines)


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in pages():
        for target in (a or b for a, b in LINK.findall(_prose(page.read_text()))):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)} -> {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)
