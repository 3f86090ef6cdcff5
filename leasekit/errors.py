"""Every error leasekit raises: one root, ``LeasekitError``.

Argument errors also subclass ``ValueError`` or ``TypeError`` so callers that
catch the builtin families keep working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .structs import OffsetRange, TableBucket

__all__ = [
    "LeasekitError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "InvalidLeaseIdError",
    "InvalidDurationError",
    "TableNotFoundError",
    "TableExistsError",
    "BucketNotFoundError",
    "SnapshotNotFoundError",
    "LeaseNotFoundError",
    "LeaseExpiredError",
    "NotPinnedError",
    "IllegalStateError",
    "PartialAppendError",
    "SessionLostError",
    "DataFileMissingError",
    "IllegalOperationError",
    "CommitFailedError",
    "NoOffsetForBucketError",
    "OffsetOutOfRangeError",
    "GroupNotEmptyError",
    "CorruptMetadataError",
    "MetadataTooLargeError",
    "ZooKeeperUnavailableError",
    "PermissionDeniedError",
    "JavaNotFoundError",
    "WarehouseOwnedError",
    "LeadershipLostError",
]


class LeasekitError(Exception):
    """Root of every leasekit error."""

    retriable = False


class InvalidArgumentError(LeasekitError, ValueError):
    """An argument has a bad value."""


class InvalidTypeError(LeasekitError, TypeError):
    """An argument has the wrong type."""


class InvalidLeaseIdError(InvalidArgumentError):
    """A lease or group id breaks the id rule (1-128 of [A-Za-z0-9._-], not . or ..)."""


class InvalidDurationError(InvalidArgumentError):
    """A duration cannot be parsed or is out of the allowed range."""


class TableNotFoundError(LeasekitError):
    """The named table does not exist."""


class TableExistsError(LeasekitError):
    """A table with that name exists already."""


class BucketNotFoundError(LeasekitError):
    """The bucket number is outside the table's bucket range."""


class SnapshotNotFoundError(LeasekitError):
    """The snapshot does not exist (never taken, or deleted by retention)."""


class LeaseNotFoundError(LeasekitError):
    """The lease does not exist."""


class LeaseExpiredError(LeasekitError):
    """The lease expired (or was dropped) before the call."""


class NotPinnedError(LeasekitError):
    """The lease does not pin every bucket the call needs."""


class IllegalStateError(LeasekitError):
    """The call is not allowed in the current state."""


class SessionLostError(IllegalStateError):
    """A write lost its ZooKeeper session before it committed (a long outage or pause):
    nothing of it was committed and its files become orphans; retrying it is safe."""

    retriable = True


class DataFileMissingError(IllegalStateError):
    """A file the metadata still lists is missing (a disk fault, a file deleted by hand): its
    records cannot be read. ``file`` names it; ``bucket`` is the TableBucket whose log it holds
    (None for a file that is not a log segment's)."""

    def __init__(self, message: str, file: str, bucket: TableBucket | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.bucket = bucket


class PartialAppendError(IllegalStateError):
    """An append that spans several ZooKeeper transactions stopped after some of them
    committed. Exactly ``committed`` is visible; retrying ``remaining`` with the same
    operation (``operation``: "upsert" or "delete") never duplicates a record."""

    def __init__(
        self,
        message: str,
        committed: dict[TableBucket, OffsetRange],
        uncommitted: list[TableBucket],
        remaining: Any = None,
        operation: str = "upsert",
        unknown: list[TableBucket] | None = None,
    ) -> None:
        super().__init__(message)
        self.committed = committed
        """Buckets whose records are visible, with their offset ranges."""
        self.uncommitted = uncommitted
        """Buckets of the append with nothing committed."""
        self.remaining = remaining
        """The rows of ``uncommitted``: a pyarrow Table in the table's schema (primary-key
        columns only for a delete), or a Spark DataFrame for ``leasekit.spark.write``."""
        self.operation = operation
        """"upsert" (retry with ``table.append``) or "delete" (retry with ``table.delete``)."""
        self.unknown = unknown or []
        """Buckets whose commit outcome is unknown (ZooKeeper unreachable); their rows are
        not in ``remaining``: compare their end offsets before writing them again."""


class IllegalOperationError(LeasekitError):
    """The call is never allowed for this object (for example commit without a group)."""


class CommitFailedError(LeasekitError):
    """An offset commit was rejected (the member no longer owns the bucket)."""


class NoOffsetForBucketError(LeasekitError):
    """No committed offset and auto_offset_reset is "none"."""


class OffsetOutOfRangeError(LeasekitError):
    """An offset lies outside [beginning, end] of its bucket."""


class GroupNotEmptyError(LeasekitError):
    """The consumer group still has live members."""


class CorruptMetadataError(LeasekitError):
    """A metadata value cannot be decoded; ``path`` names the znode."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class MetadataTooLargeError(LeasekitError):
    """A metadata value would exceed what ZooKeeper can store."""


class ZooKeeperUnavailableError(LeasekitError):
    """ZooKeeper could not be reached in time; the call may be retried."""

    retriable = True


class PermissionDeniedError(LeasekitError):
    """ZooKeeper refused the call for lack of credentials (ACL)."""


class JavaNotFoundError(LeasekitError):
    """No Java runtime was found for the embedded ZooKeeper or Spark."""


class WarehouseOwnedError(IllegalStateError):
    """The warehouse namespace directory belongs to another metadata store (another ZooKeeper,
    or another instance of the namespace): nothing is written or deleted there."""


class LeadershipLostError(LeasekitError):
    """A janitor no longer holds the election (its session ended, another janitor leads): its
    write was refused inside the ZooKeeper transaction, and it deletes no file after that."""
