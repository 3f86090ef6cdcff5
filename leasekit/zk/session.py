"""Starting the ZooKeeper session of the ZooKeeper layer: kazoo's client with leasekit's
retry policy, credentials, default ACL and polling handler, its failures to connect
translated."""

from __future__ import annotations

import logging
from typing import Any

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from ..errors import PermissionDeniedError, ZooKeeperUnavailableError
from .poll import make_handler

__all__ = ["start_client", "MAX_TIMEOUT", "MAX_SESSION_TIMEOUT"]

MAX_TIMEOUT = 365 * 86400.0
"""Seconds: a longer timeout waits this long (thread waits refuse much longer ones)."""

MAX_SESSION_TIMEOUT = (2**31 - 1) / 1000
"""Seconds: the protocol sends the session timeout as int32 milliseconds (a longer one would
stop kazoo from connecting at all); servers grant far less anyway."""

_RETRY = {"max_tries": -1, "delay": 0.05, "backoff": 2, "max_delay": 1.0, "ignore_expire": True}
"""Connections and commands are retried with backoff until their deadline, across expiries."""


def start_client(
    hosts: str,
    session_timeout: float,
    timeout: float,
    auth: tuple[str, str] | None,
    acl: list[Any] | None,
    log: logging.Logger,
) -> KazooClient:
    """A started kazoo client of ``hosts``; commands retried for up to ``timeout`` seconds.

    Raises:
        ZooKeeperUnavailableError: no server answered within ``timeout`` seconds.
        PermissionDeniedError: ZooKeeper rejected the credentials ``auth``.
    """
    auth_data = None if auth is None else [("digest", "{}:{}".format(*auth))]
    client = KazooClient(
        hosts=hosts,
        timeout=session_timeout,
        auth_data=auth_data,
        default_acl=acl,
        connection_retry=dict(_RETRY),
        command_retry=dict(_RETRY, deadline=timeout),
        logger=log,
        handler=make_handler(),
    )
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.stop()
        client.close()
        raise ZooKeeperUnavailableError(
            f"cannot reach ZooKeeper at {hosts} within {timeout:g}s"
        ) from None
    except kx.AuthFailedError:
        client.stop()
        client.close()
        raise PermissionDeniedError(f"ZooKeeper at {hosts} rejected the credentials") from None
    return client
