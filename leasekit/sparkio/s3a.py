"""Spark's own ``s3a`` reader for an S3 warehouse: the jars and Hadoop settings a new session
needs so that its native Parquet scans read ``s3a://`` paths (docs/scale.md).

The settings come from the warehouse URI's file-system options (``endpoint_override``,
``scheme``, ``region``) and the standard AWS environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``), as
pyarrow takes them for the warehouse itself. The jars are ``hadoop-aws`` and the AWS SDK v2
modules it needs: fetched once from Maven Central by ``make peers`` into
``~/.cache/leasekit/peers/hadoop-aws-<hash>/jars`` (``peers/hadoop-aws/pom.xml``), or any
directory ``LEASEKIT_S3A_JARS`` names. Nothing here downloads.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import parse_qs

from ..errors import IllegalStateError, InvalidTypeError
from ..warehouse import Warehouse

__all__ = ["JARS_ENV", "s3a_jars", "s3a_settings", "s3a_conf", "warehouse_of"]

JARS_ENV = "LEASEKIT_S3A_JARS"
"""A directory of jars (or a comma-separated list of jar files) to use instead of the cache."""

PEER = "hadoop-aws"
_POM = Path(__file__).resolve().parents[2] / "peers" / PEER / "pom.xml"
"""The Maven project of the jars, in a source checkout (an installed leasekit has none)."""

SIMPLE_PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
TEMPORARY_PROVIDER = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"


def _cache_dir() -> Path:
    """Where ``peers.maven`` keeps fetched jars (``LEASEKIT_PEERS_CACHE``, else
    ``$XDG_CACHE_HOME/leasekit/peers``, else ``~/.cache/leasekit/peers``)."""
    explicit = os.environ.get("LEASEKIT_PEERS_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "leasekit" / "peers"


def _cached() -> Path | None:
    """The cached jar directory: the one of this checkout's pom (its hash names it), or, for
    an installed leasekit, the newest complete one; None when there is none."""
    cache = _cache_dir()
    if _POM.is_file():
        target = cache / f"{PEER}-{hashlib.sha256(_POM.read_bytes()).hexdigest()[:12]}"
        return target / "jars" if (target / "complete").is_file() else None
    done = sorted(cache.glob(f"{PEER}-*/complete"), key=lambda p: p.stat().st_mtime)
    return done[-1].parent / "jars" if done else None


def s3a_jars() -> list[str]:
    """The jar files Spark's ``s3a`` file system needs beyond pyspark's own (sorted paths).

    Returns:
        The paths: of ``LEASEKIT_S3A_JARS`` if set, else of the cache ``make peers`` fills.

    Raises:
        IllegalStateError: the jars are not there (the message says how to fetch them).
    """
    explicit = os.environ.get(JARS_ENV)
    if explicit:
        listed = [Path(p) for p in explicit.split(",") if p.strip()]
        found = [j for p in listed for j in (sorted(p.glob("*.jar")) if p.is_dir() else [p])]
        missing = [str(j) for j in found if not j.is_file()]
        if not found or missing:
            raise IllegalStateError(
                f"{JARS_ENV}={explicit} names no jar files, or missing ones: {missing[:3]}"
            )
        return [str(j) for j in found]
    where = _cached()
    jars = sorted(where.glob("*.jar")) if where is not None else []
    if not jars:
        raise IllegalStateError(
            "Spark's s3a reader needs the hadoop-aws jars and the AWS SDK modules they use, "
            f"which are not in {_cache_dir()}: run `make peers` in a leasekit checkout (it "
            "fetches them from Maven Central once, about 13 MB), or set "
            f"{JARS_ENV} to a directory of them; s3a=False starts Spark without them "
            '(format("leasekit") needs none)'
        )
    return [str(j) for j in jars]


def _endpoint(options: dict[str, str]) -> str | None:
    """The S3 endpoint URL: the URI's ``endpoint_override`` (with its ``scheme``, https by
    default), else ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``; None for AWS itself."""
    override = options.get("endpoint_override")
    if override:
        return override if "://" in override else f"{options.get('scheme', 'https')}://{override}"
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def s3a_settings(warehouse: Warehouse | None = None) -> dict[str, str]:
    """The Hadoop settings of Spark's ``s3a`` file system for ``warehouse``, as Spark
    settings (``spark.hadoop.fs.s3a.*``).

    Arguments:
        warehouse: the warehouse, whose URI options count first; None: the environment only.

    Returns:
        For an endpoint other than AWS: ``fs.s3a.endpoint``, path-style access, and SSL off
        for ``http://``; ``fs.s3a.endpoint.region`` when a region is known; the access key,
        secret key (and session token) with the credentials provider that reads them, when
        the environment has them (else s3a's own chain looks: instance roles and so on).

    Raises nothing.
    """
    query = parse_qs(warehouse.options) if warehouse is not None else {}
    options = {key: values[-1] for key, values in query.items()}
    out: dict[str, str] = {}
    endpoint = _endpoint(options)
    if endpoint:
        out["fs.s3a.endpoint"] = endpoint
        out["fs.s3a.path.style.access"] = "true"
        if endpoint.startswith("http://"):
            out["fs.s3a.connection.ssl.enabled"] = "false"
    region = options.get("region") or os.environ.get("AWS_REGION")
    region = region or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        out["fs.s3a.endpoint.region"] = region
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        out["fs.s3a.access.key"], out["fs.s3a.secret.key"] = key, secret
        token = os.environ.get("AWS_SESSION_TOKEN")
        if token:
            out["fs.s3a.session.token"] = token
        out["fs.s3a.aws.credentials.provider"] = TEMPORARY_PROVIDER if token else SIMPLE_PROVIDER
    return {f"spark.hadoop.{name}": value for name, value in out.items()}


def warehouse_of(warehouse: object) -> Warehouse | None:
    """``warehouse`` (a path, URI or ``Warehouse``) as a ``Warehouse``; None gives the one
    ``LEASEKIT_WAREHOUSE`` names, or None without it.

    Raises:
        InvalidTypeError: ``warehouse`` is of another type.
    """
    if warehouse is None:
        named = os.environ.get("LEASEKIT_WAREHOUSE")
        return Warehouse(named) if named else None
    if isinstance(warehouse, Warehouse):
        return warehouse
    if isinstance(warehouse, (str, os.PathLike)):
        return Warehouse(warehouse)
    raise InvalidTypeError(
        f"warehouse must be a path, a URI or a Connection, not {type(warehouse).__name__}"
    )


def s3a_conf(warehouse: object = None, s3a: bool | None = None) -> dict[str, str]:
    """The settings a new session needs to read ``warehouse`` through ``s3a``: its jars
    (``spark.jars``) and ``s3a_settings``; none unless ``s3a`` is True, or None and the
    warehouse is ``s3://``.

    Raises:
        InvalidTypeError: ``s3a`` is not a bool or None, or a bad ``warehouse``.
        IllegalStateError: the jars are not there.
    """
    if s3a is not None and not isinstance(s3a, bool):
        raise InvalidTypeError(f"s3a must be True, False or None, not {type(s3a).__name__}")
    where = warehouse_of(warehouse)
    if s3a is None:
        s3a = where is not None and where.scheme == "s3"
    if not s3a:
        return {}
    return {"spark.jars": ",".join(s3a_jars()), **s3a_settings(where)}
