"""Where every kind of metadata lives in ZooKeeper, under one namespace root.

Tables are addressed by name; their data (buckets, log segments, snapshots) by table id,
so a dropped and recreated table never shares metadata with its predecessor.
"""

from __future__ import annotations

__all__ = ["Paths"]

SEGMENT_DIGITS = 20
SNAPSHOT_DIGITS = 10


class Paths:
    """Path builder for one namespace."""

    def __init__(self, namespace: str) -> None:
        self.root = f"/{namespace}"
        self.settings = f"{self.root}/settings"
        self.clock = f"{self.root}/clock"
        self.tables = f"{self.root}/tables"
        self.data = f"{self.root}/data"
        self.dropped = f"{self.root}/dropped"
        self.leases = f"{self.root}/leases"
        self.janitor = f"{self.root}/janitor"
        self.writes = f"{self.root}/writes"
        self.groups = f"{self.root}/groups"
        self.identity = f"{self.root}/identity"
        """The namespace's random identity, which its warehouse directory's owner marker names."""
        self.access = f"{self.root}/access"
        """Present once the namespace is closed to writers without its credentials."""
        self.keepalives = f"{self.root}/keepalives"
        """Parent of the lease keepalives' holder znodes; created on first use (not part of
        ``skeleton``, so read-only clients of older namespaces never need to create it)."""

    def skeleton(self) -> list[str]:
        """Znodes every namespace has."""
        return [
            self.root,
            self.settings,
            self.clock,
            self.tables,
            self.data,
            self.dropped,
            self.leases,
            self.writes,
            self.groups,
        ]

    def table(self, name: str) -> str:
        return f"{self.tables}/{name}"

    def table_data(self, table_id: str) -> str:
        return f"{self.data}/{table_id}"

    def dropped_table(self, table_id: str) -> str:
        return f"{self.dropped}/{table_id}"

    def bucket(self, table_id: str, bucket: int) -> str:
        return f"{self.data}/{table_id}/{bucket}"

    def log(self, table_id: str, bucket: int) -> str:
        return f"{self.bucket(table_id, bucket)}/log"

    def segment(self, table_id: str, bucket: int, base_offset: int) -> str:
        return f"{self.log(table_id, bucket)}/{base_offset:0{SEGMENT_DIGITS}d}"

    def is_segment(self, path: str) -> bool:
        """Whether ``path`` has the form of a log segment record (``segment``)."""
        prefix = self.data + "/"
        parts = path[len(prefix) :].split("/") if path.startswith(prefix) else []
        return len(parts) == 4 and parts[2] == "log"

    def snapshots(self, table_id: str, bucket: int) -> str:
        return f"{self.bucket(table_id, bucket)}/snapshots"

    def retired(self, table_id: str, bucket: int) -> str:
        """Parent of the bucket's records of segment files a merge replaced
        (``RetiredRecord``); created by the bucket's first merge."""
        return f"{self.bucket(table_id, bucket)}/retired"

    def retired_run(self, table_id: str, bucket: int, base_offset: int, token: str) -> str:
        """The record of one merge's replaced files: its merged segment's base offset, then the
        merge's write token (two merges may start at the same offset)."""
        return f"{self.retired(table_id, bucket)}/{base_offset:0{SEGMENT_DIGITS}d}-{token}"

    def snapshot(self, table_id: str, bucket: int, snapshot_id: int) -> str:
        # the layout of ``snapshots`` spelled out: acquire builds one path per pin
        return f"{self.data}/{table_id}/{bucket}/snapshots/{snapshot_id:0{SNAPSHOT_DIGITS}d}"

    def latest(self, table_id: str) -> str:
        """Parent of the table's latest-snapshot arrays, one child per chunk of buckets."""
        return f"{self.data}/{table_id}/latest"

    def latest_chunk(self, table_id: str, chunk: int) -> str:
        return f"{self.latest(table_id)}/{chunk}"

    def pin(self, table_id: str, bucket: int, snapshot_id: int, lease_id: str) -> str:
        """A lease's pin: a child of the snapshot's znode, so neither can outlive the other."""
        data = self.data  # the layout of ``snapshot`` spelled out: acquire builds one per pin
        return f"{data}/{table_id}/{bucket}/snapshots/{snapshot_id:0{SNAPSHOT_DIGITS}d}/{lease_id}"

    def table_changes(self, table_id: str) -> str:
        """The table's change marker (the parent of its latest arrays, which every table has):
        set in every transaction that changes its buckets, log, snapshots or latest arrays."""
        return self.latest(table_id)

    def group_changes(self, group_id: str) -> str:
        """The group's change marker (the group's own znode): set in every transaction that
        changes its offsets or owners; its assignment and members are watched themselves."""
        return self.group(group_id)

    def marker_of(self, path: str) -> str | None:
        """The znode to watch for changes of ``path``, when it is not ``path`` itself: the table's
        or group's change marker, a group's members list or assignment, ``leases`` for a lease's
        pin arrays (with its record); None where ``path`` is watched as it is.

        Arguments:
            path: a znode of this namespace.

        Returns:
            The marker, or None.
        """
        for parent in (self.data, self.groups, self.leases):
            if path.startswith(parent + "/"):
                parts = path[len(parent) + 1 :].split("/")
                break
        else:
            return None
        if len(parts) < 2:
            return None  # a table's data znode (the drop fence), a group, a lease record
        if parent == self.data:
            return self.table_changes(parts[0])
        if parent == self.leases:
            return self.leases
        if parts[1] in ("members", "assignment"):
            return f"{self.group(parts[0])}/{parts[1]}"
        return self.group_changes(parts[0])

    def group(self, group_id: str) -> str:
        """A consumer group: its members, assignment, bucket owners and committed offsets."""
        return f"{self.groups}/{group_id}"

    def group_members(self, group_id: str) -> str:
        return f"{self.group(group_id)}/members"

    def member(self, group_id: str, member_id: str) -> str:
        """A live member of the group (ephemeral: it ends with the member's session)."""
        return f"{self.group_members(group_id)}/{member_id}"

    def group_assignment(self, group_id: str) -> str:
        """The group's assignment: written by its leader, with its generation, in one write."""
        return f"{self.group(group_id)}/assignment"

    def group_owners(self, group_id: str) -> str:
        return f"{self.group(group_id)}/owners"

    def owner(self, group_id: str, table_id: str, bucket: int) -> str:
        """Which member owns one bucket now (claimed, then released after its revocation);
        fenced commits check its version."""
        return f"{self.group_owners(group_id)}/{table_id}.{bucket}"

    def group_offsets(self, group_id: str) -> str:
        return f"{self.group(group_id)}/offsets"

    def offset(self, group_id: str, table_id: str, bucket: int) -> str:
        """The group's committed offset of one bucket of a table."""
        return f"{self.group_offsets(group_id)}/{table_id}.{bucket}"

    @staticmethod
    def parse_offset(name: str) -> tuple[str, int]:
        """(table_id, bucket) of an offset znode's name; ValueError if it is not one."""
        return _table_and_number(name)

    def lease(self, lease_id: str) -> str:
        return f"{self.leases}/{lease_id}"

    def lease_pins(self, lease_id: str) -> str:
        return f"{self.lease(lease_id)}/pins"

    def lease_chunk(self, lease_id: str, table_id: str, chunk: int) -> str:
        """The lease's pinned snapshot ids of one chunk of a table's buckets (see ``chunked``)."""
        return f"{self.lease_pins(lease_id)}/{table_id}.{chunk}"

    @staticmethod
    def parse_lease_chunk(name: str) -> tuple[str, int]:
        """(table_id, chunk) of the name of a lease's pin-array znode; ValueError if it is not
        one."""
        return _table_and_number(name)

    def keepalive(self, token: str) -> str:
        """Ephemeral holder znode of a running lease keepalive (the lease record names
        ``token``): it vanishes with the keepalive's session."""
        return f"{self.keepalives}/{token}"

    def sinks(self, table_id: str) -> str:
        """Parent of the table's stream sink markers; created on first use."""
        return f"{self.data}/{table_id}/sinks"

    def sink(self, table_id: str, query_id: str) -> str:
        """The batch marker of one streaming query writing into the table (``SinkMarkRecord``):
        it goes with the table's data when the table is dropped."""
        return f"{self.sinks(table_id)}/{query_id}"

    def write(self, token: str) -> str:
        """Marker of a write in progress (ephemeral, or persistent for Spark tasks); its files
        carry ``token`` in their path."""
        return f"{self.writes}/{token}"


def _table_and_number(name: str) -> tuple[str, int]:
    """``<table_id>.<n>`` -> (table_id, n): the names of offset and pin-array znodes."""
    table_id, _, number = name.rpartition(".")
    if not table_id or not number.isdigit():
        raise ValueError(f"not a <table id>.<number> znode name: {name!r}")
    return table_id, int(number)
