"""The shape of the code: modules under 400 lines of code, functions under 60,
ruff clean at 100 columns, and nothing outside the library reaching into a connection."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ("leasekit", "widgets")
NOT_TESTS = ("leasekit", "widgets", "bench", "peers")
CALLERS = ("widgets", "notebooks", "bench", "tests")
MAX_MODULE_LINES = 400
LONGER_MODULES = {
    "leasekit/consumers/admin/group_view.py": (
        480,
        "one concept: a group as ZooKeeper holds it and the rows of its "
        "buckets, which every describe, reset and reading of all groups takes together",
    ),
}
"""Modules allowed past MAX_MODULE_LINES of code by name: (their limit, why one concept)."""
MAX_FUNCTION_LINES = 60
MAX_TEST_FILE_LINES = 500
INTERNALS = ("store", "paths", "clock")
"""What only the library may reach on a connection (tests use ``leasekit.testing.context``)."""


def _python_files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _code_lines(source: str) -> int:
    """Lines outside the docstrings of the module, its classes and functions: the Arguments,
    Returns and Raises a public method documents never push one concept
    into two files."""
    docs = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    docs += first.end_lineno - first.lineno + 1
    return len(source.splitlines()) - docs


def test_no_library_module_is_over_400_lines_of_code():
    # one concept per module, under ~400 lines
    long = [
        f"{_rel(p)}: {n} lines of code"
        for p in _python_files(*LIBRARY)
        if (n := _code_lines(p.read_text(encoding="utf-8")))
        > LONGER_MODULES.get(_rel(p), (MAX_MODULE_LINES, ""))[0]
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines of code:\n" + "\n".join(long)


def test_no_test_file_is_over_500_lines():
    # tests mirror the packages, split by concern rather than grown without end
    long = [
        f"{_rel(p)}: {n} lines"
        for p in _python_files("tests")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_TEST_FILE_LINES
    ]
    assert not long, f"test files over {MAX_TEST_FILE_LINES} lines:\n" + "\n".join(long)


def test_no_function_outside_tests_is_over_60_lines():
    long = []
    for path in _python_files(*NOT_TESTS):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{_rel(path)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_ruff_is_clean_with_long_lines_enforced():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    ignored = pyproject.split("[tool.ruff.lint]", 1)[1].split("[", 1)[0]
    assert "E501" not in ignored, "E501 (line too long) must not be ignored"
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", *NOT_TESTS, "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _notebook_cells(path: Path) -> Iterator[str]:
    for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
        if cell.get("cell_type") == "code":
            source = "".join(cell.get("source", []))
            yield "\n".join(
                "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
            )


def _sources(folder: str) -> Iterator[tuple[str, str]]:
    for path in _python_files(folder):
        yield _rel(path), path.read_text(encoding="utf-8")
    for path in sorted((ROOT / folder).rglob("*.ipynb")):
        for number, cell in enumerate(_notebook_cells(path)):
            yield f"{_rel(path)} (code cell {number})", cell


def _reaches_inside(source: str, where: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source, where)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in INTERNALS
            and isinstance(node.value, ast.Name)
            and "conn" in node.value.id
        ):
            out.append(f"{where}:{node.lineno}: {node.value.id}.{node.attr}")
    return out


def test_nothing_outside_the_library_reaches_into_a_connection():
    # tests get the inside from leasekit.testing.context(conn), never from the
    # connection itself
    found = [
        hit
        for folder in CALLERS
        for where, src in _sources(folder)
        for hit in _reaches_inside(src, where)
    ]
    assert not found, f"{len(found)} reach(es) into a connection:\n" + "\n".join(found)
