"""The public face (the guide in docs/): every public method and property of
``Consumer``, ``Table`` and ``KvSnapshotLease`` documents its Arguments, Returns and Raises;
a consumer's keywords and defaults are written once; a bad lease id is refused first."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import leasekit as lk
from leasekit import errors, testing
from leasekit.connection import Connection
from leasekit.consumers.options import ConsumerSettings

ROOT = Path(__file__).resolve().parents[2]
FACES = {
    "leasekit/consumers/consumer.py": "Consumer",
    "leasekit/table.py": "Table",
    "leasekit/leases/lease.py": "KvSnapshotLease",
}
ARGUMENTS, RETURNS, RAISES = "Arguments:", "Returns:", "Raises:"
RAISES_NOTHING = "Raises nothing."
"""Said, as a paragraph of its own, by a member that raises no error of leasekit's."""


def _public_members(path: str, name: str) -> list[ast.FunctionDef]:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"), path)
    (klass,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return [
        node
        for node in klass.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    ]


def _sections(doc: str) -> dict[str, list[str]]:
    """The docstring's sections by heading (a heading is a line of its own at the left
    margin), each with its lines."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in doc.splitlines():
        if line in (ARGUMENTS, RETURNS, RAISES):
            current = out.setdefault(line, [])
        elif line and not line[0].isspace():
            current = None
        elif current is not None and line.strip():
            current.append(line.strip())
    return out


def _arguments(node: ast.FunctionDef) -> list[str]:
    a = node.args
    names = [x.arg for x in [*a.posonlyargs, *a.args][1:] + a.kwonlyargs]
    return names + [x.arg for x in (a.vararg, a.kwarg) if x is not None]


def _returns_none(node: ast.FunctionDef) -> bool:
    return isinstance(node.returns, ast.Constant) and node.returns.value is None


def _faults(node: ast.FunctionDef, members: set[str]) -> list[str]:
    doc = ast.get_docstring(node) or ""
    sections = _sections(doc)
    faults = []
    names = _arguments(node)
    if names and ARGUMENTS not in sections:
        faults.append("no Arguments section")
    documented = {line.split(":", 1)[0] for line in sections.get(ARGUMENTS, [])}
    faults += [f"argument {n!r} not in Arguments" for n in names if names and n not in documented]
    if node.returns is None:
        faults.append("no return annotation")
    elif not _returns_none(node) and RETURNS not in sections:
        faults.append("no Returns section")
    if RAISES not in sections and RAISES_NOTHING not in doc.splitlines():
        faults.append(f"no Raises section (nor {RAISES_NOTHING!r})")
    for line in sections.get(RAISES, []):
        faults += [
            f"{e} is not in leasekit.errors"
            for e in re.findall(r"\b\w+Error\b", line)
            if e not in errors.__all__
        ]
        faults += [
            f"raises as {m!r}, which is not a member"
            for m in re.findall(r"\bAs ``(\w+)``", line)
            if m not in members
        ]
    return faults


@pytest.mark.parametrize("path", sorted(FACES))
def test_every_public_member_documents_arguments_returns_and_raises(path):
    # a user reads the arguments, the result and the errors to handle
    nodes = _public_members(path, FACES[path])
    members = {node.name for node in nodes}
    assert len(members) >= 8, "the class was not found whole"
    found = [
        f"{FACES[path]}.{node.name}: {fault}" for node in nodes for fault in _faults(node, members)
    ]
    assert not found, "\n".join(found)


def test_the_check_finds_what_is_missing():
    source = '''
class Face:
    def plain(self, a, *rest, b=1) -> int:
        """No sections."""

    @property
    def named(self) -> str:
        """A name.

        Returns:
            It.

        Raises:
            NoSuchError: never.
        """

    def done(self, a) -> None:
        """Done.

        Arguments:
            a: it.

        Raises:
            As ``missing``.
        """
'''
    klass = ast.parse(source).body[0]
    nodes = {n.name: n for n in klass.body}
    assert _faults(nodes["plain"], set(nodes)) == [
        "no Arguments section",
        "argument 'a' not in Arguments",
        "argument 'b' not in Arguments",
        "argument 'rest' not in Arguments",
        "no Returns section",
        "no Raises section (nor 'Raises nothing.')",
    ]
    assert _faults(nodes["named"], set(nodes)) == ["NoSuchError is not in leasekit.errors"]
    assert _faults(nodes["done"], set(nodes)) == ["raises as 'missing', which is not a member"]


def test_a_consumers_keywords_and_defaults_are_written_once():
    # docs/consumers.md: conn.consumer's keywords are ConsumerSettings' fields, with its defaults
    keywords = [
        p
        for p in inspect.signature(Connection.consumer).parameters.values()
        if p.kind is p.KEYWORD_ONLY
    ]
    assert [p.name for p in keywords] == list(ConsumerSettings._fields)
    assert {p.name: p.default for p in keywords} == ConsumerSettings()._asdict()
    assert ConsumerSettings()._asdict() == {
        "group_id": None,
        "auto_offset_reset": "latest",
        "enable_auto_commit": True,
        "auto_commit_interval": "5s",
        "session_timeout": "10s",
        "assignor": "sticky",
        "listener": None,
        "max_poll_records": 10_000,
        "max_poll_interval": "5m",
        "parent_first": True,
    }


def test_a_bad_lease_id_is_refused_first_whatever_else_is_wrong(conn):
    # L1, L2: every call taking a lease id validates it first, before any ZooKeeper call
    ctx = testing.context(conn)
    before = ctx.store.round_trips
    missing = [lk.TableBucket("no_such_table", 0)]
    calls = [
        lambda: conn.acquire_kv_snapshot_lease("a/b", {missing[0]: 0}, "0s"),
        lambda: conn.renew_kv_snapshot_lease("a/b", "0s"),
        lambda: conn.release_kv_snapshot_lease("a/b", missing),
        lambda: conn.drop_kv_snapshot_lease("a/b"),
    ]
    for call in calls:
        with pytest.raises(lk.InvalidLeaseIdError):
            call()
    assert ctx.store.round_trips == before
