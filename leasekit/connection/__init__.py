"""``connect()`` and the ``Connection``: one ZooKeeper session, one warehouse, one namespace.

The facade is split by concern (tables and settings, leases, consumer groups and retention);
``context_of`` gives the ``Context`` behind a connection to the library's own entry points;
``namespaces`` lists the namespaces of an ensemble that keep their data in a warehouse.
"""

from __future__ import annotations

from .facade import Connection, context_of
from .namespaces import namespaces
from .open import DEFAULT_WAREHOUSE, connect

__all__ = ["connect", "Connection", "DEFAULT_WAREHOUSE", "context_of", "namespaces"]
