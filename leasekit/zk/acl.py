"""Access control of a namespace: the ACLs leasekit gives its znodes with ``auth``, what a
client may do under an ACL, and the pass that closes a namespace created without ``auth``."""

from __future__ import annotations

from collections.abc import Sequence

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.security import (
    ACL,
    Id,
    Permissions,
    make_acl,
    make_digest_acl,
    make_digest_acl_credential,
)

from ..errors import PermissionDeniedError
from .errors import translated
from .reads import GetChildren, Reader

__all__ = ["Access", "world_perms", "protect", "write_refusal"]

WORLD = Id("world", "anyone")
BATCH = 2000
"""Znodes whose ACLs one pipelined batch of the closing pass reads, then closes and lists."""
RECHECKS = 20
"""Times the closed znodes are listed again for children that raced their closing."""


def world_perms(acls: Sequence[ACL]) -> int:
    """What anyone, without credentials, may do under ``acls`` (``Permissions`` bits)."""
    perms = 0
    for acl in acls:
        if acl.id == WORLD:
            perms |= acl.perms
    return perms


class Access:
    """The ACLs of one user's namespace, and what that user may do.

    With ``auth`` the user may do anything and everyone else may only read (like Kafka's
    secured ZooKeeper); the clock znode, which readers write to read the server's time, is
    also world-writable (WRITE sets its data; no CREATE, DELETE or ADMIN).
    """

    WRITES = Permissions.CREATE | Permissions.DELETE
    """What a user needs on a parent to write below it."""

    def __init__(self, auth: tuple[str, str] | None) -> None:
        self.user = None if auth is None else auth[0]
        if auth is None:
            self.identities = {WORLD}
            self.acl: list[ACL] | None = None
            self.clock_acl: list[ACL] | None = None
            return
        user, password = auth
        mine = make_digest_acl(user, password, all=True)
        self.identities = {WORLD, Id("digest", make_digest_acl_credential(user, password))}
        self.acl = [mine, make_acl("world", "anyone", read=True)]
        self.clock_acl = [mine, make_acl("world", "anyone", read=True, write=True)]

    def allowed(self, acls: Sequence[ACL]) -> int:
        """What this user may do under ``acls`` (``Permissions`` bits)."""
        perms = 0
        for acl in acls:
            if acl.id in self.identities:
                perms |= acl.perms
        return perms

    def wanted(self, path: str, clock: str, acls: Sequence[ACL]) -> list[ACL] | None:
        """The ACL to give ``path`` now (None: leave it): an open znode gets this user's ACL;
        the clock gets the clock's ACL where this user may change it."""
        if self.acl is None or self.clock_acl is None:
            return None
        if path == clock:
            same = sorted(map(tuple, acls)) == sorted(map(tuple, self.clock_acl))
            can = self.allowed(acls) & Permissions.ADMIN
            return None if same or not can else self.clock_acl
        return self.acl if world_perms(acls) & ~Permissions.READ else None

    def close_tree(self, client: KazooClient, root: str, clock: str, timeout: float) -> list[str]:
        """Give every znode from ``root`` down that anyone may change this user's ACL, top down:
        a znode is closed before its children are listed, so no child created meanwhile
        escapes. Returns the znodes left open (their ACL refused this user's change).

        Each level goes in pipelined batches: the ACLs read, the changes made, then the
        listings (multiReads). ZooKeeper checks a create against its parent's pending change
        record, which a pending ACL change leaves with the old ACL, so a create racing the
        change may still land: the closed znodes are listed again until no child is new.
        """
        closing = _Closing(self, client, Reader(lambda: client, timeout), clock, timeout)
        closing.walk([root])
        for _ in range(RECHECKS):
            changed = list(closing.listed)
            pending = closing.reader.send([GetChildren(p) for p in changed])
            listings = closing.reader.collect(pending)
            new = [
                f"{path}/{name}"
                for path, listing in zip(changed, listings)
                for name in listing.value or ()
                if name not in closing.listed[path]
            ]
            if not new:
                return closing.refused
            for path, listing in zip(changed, listings):
                closing.listed[path].update(listing.value or ())
            closing.walk(new)
        raise PermissionDeniedError(
            f"the namespace {root} kept gaining znodes from clients without credentials while "
            "it was being closed; try again"
        )


class _Closing:
    """One closing pass: what it closed (with the children it listed) and what refused."""

    def __init__(
        self, access: Access, client: KazooClient, reader: Reader, clock: str, timeout: float
    ) -> None:
        self.access, self.client, self.reader = access, client, reader
        self.clock, self.timeout = clock, timeout
        self.refused: list[str] = []
        self.listed: dict[str, set[str]] = {}
        """Each znode this pass closed, with the children it listed after closing it."""

    def walk(self, level: list[str]) -> None:
        """Close ``level`` and everything below it, one level at a time."""
        while level:
            following: list[str] = []
            for start in range(0, len(level), BATCH):
                following += self._batch(level[start : start + BATCH])
            level = following

    def _batch(self, paths: list[str]) -> list[str]:
        client, timeout = self.client, self.timeout
        reads = [client.get_acls_async(p) for p in paths]
        changes: dict[str, list[ACL]] = {}
        present: list[str] = []
        for path, read in zip(paths, reads):
            try:
                acls, _ = read.get(timeout=timeout)
            except kx.NoNodeError:
                continue
            present.append(path)
            wanted = self.access.wanted(path, self.clock, acls)
            if wanted is not None:
                changes[path] = wanted
        sets = {p: client.set_acls_async(p, acl) for p, acl in changes.items()}
        for path, result in sets.items():  # applied before the listing is even sent
            try:
                result.get(timeout=timeout)
            except kx.NoNodeError:
                pass
            except kx.NoAuthError:
                self.refused.append(path)
        listings = self.reader.collect(self.reader.send([GetChildren(p) for p in present]))
        children: list[str] = []
        for path, listing in zip(present, listings):
            if listing.error is not None:
                raise listing.error
            names = listing.value or []
            if path in sets:
                self.listed[path] = set(names)
            children += [f"{path}/{name}" for name in names]
        return children


def protect(
    client: KazooClient,
    access: Access,
    root: str,
    *,
    seal: str,
    seal_data: bytes,
    clock: str,
    timeout: float,
) -> str | None:
    """Close the namespace at ``root`` to clients without this user's credentials
    (docs/security.md): a no-op once ``seal`` marks it closed; else every open znode gets this
    user's ACL, then ``seal`` is written. Returns None, or why this user may not write the
    namespace (it is closed by other credentials; reads still work).

    Raises ``PermissionDeniedError`` when a znode anyone may change refuses the change.
    """
    root_acls, _ = client.get_acls(root)
    if not world_perms(root_acls) & ~Permissions.READ:
        if not access.allowed(root_acls) & Permissions.CREATE:
            return (
                f"the namespace {root} is protected by other ZooKeeper credentials than "
                f"{access.user!r}: this connection may read it but not write"
            )
        sealed = client.exists(seal) is not None
        if sealed and not world_perms(client.get_acls(seal)[0]) & ~Permissions.READ:
            return None
    refused = access.close_tree(client, root, clock, timeout)
    still_open = [
        p
        for p in refused
        if client.exists(p) is not None and world_perms(client.get_acls(p)[0]) & ~Permissions.READ
    ]
    if still_open:
        raise PermissionDeniedError(
            f"the namespace {root} was created without credentials and cannot be closed: "
            f"{len(still_open)} znodes that anyone may change refuse a new ACL (first: "
            f"{still_open[0]}); refusing to work on an open namespace"
        )
    try:
        client.create(seal, seal_data)
    except kx.NodeExistsError:
        pass
    return None


def write_refusal(
    client: KazooClient, access: Access, auth: tuple[str, str] | None, path: str
) -> str | None:
    """Why ``access`` may not create or delete children of ``path`` (its ACL refuses these
    credentials, ``auth``), or None if it may; computed from the ACL, nothing written."""
    with translated(f"read the ACL of {path}"):
        try:
            acls, _ = client.retry(client.get_acls, path)
        except kx.NoNodeError:
            return None
    if access.allowed(acls) & access.WRITES == access.WRITES:
        return None
    who = "without credentials" if auth is None else f"as {auth[0]!r}"
    return f"ZooKeeper's ACL of {path} does not let this connection ({who}) write there"
