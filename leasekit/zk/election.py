"""Leader election of the ZooKeeper layer: kazoo's recipe with its errors translated."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from kazoo import exceptions as kx

from .errors import translated

__all__ = ["Election"]


class Election:
    """A leader election: ``run(func)`` blocks until this client leads, runs ``func`` and gives
    up leadership when it returns; ``cancel()`` stops waiting; ``contenders()`` lists ids."""

    def __init__(self, recipe: Any) -> None:
        self._recipe = recipe

    def run(self, func: Callable[..., Any], *args: Any) -> Any:
        with translated("leader election"):
            return self._recipe.run(func, *args)

    def leader_path(self) -> str | None:
        """While this client leads (inside ``run``'s ``func``): the path of its election znode,
        ephemeral, so it is gone once its session ends, even if the client reconnects on a new
        session. A transaction that checks it is a fenced one (``ZkStore.fenced``). None when
        not leading."""
        lock = self._recipe.lock
        if not lock.is_acquired or not lock.node:
            return None
        return f"{lock.path}/{lock.node}"

    def cancel(self) -> None:
        with contextlib.suppress(kx.KazooException):
            self._recipe.cancel()

    def contenders(self) -> list[str]:
        with translated("list election contenders"):
            return list(self._recipe.contenders())
