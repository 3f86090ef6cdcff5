"""Subscription by pattern (C17): the tables of a namespace whose names match a regular
expression, kept current from one ZooKeeper watch on the namespace's table znodes, never by
polling. The watch only notes the newest matching names and wakes the consumer; the consumer
applies them inside ``poll``, as aiokafka applies a metadata change."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError, InvalidTypeError
from ..tables.catalog import valid_table_names

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["compile_pattern", "TableWatch"]

DEBOUNCE = 0.1
"""Seconds a change of the namespace's tables waits for more (tables created in a loop make one
change of the subscription, not one each)."""


def compile_pattern(pattern: object) -> re.Pattern[str]:
    """``pattern`` (a str, or a compiled str pattern) as a compiled regular expression;
    ``InvalidArgumentError`` when it does not compile."""
    if isinstance(pattern, re.Pattern):
        if not isinstance(pattern.pattern, str):
            raise InvalidTypeError("pattern must match str table names, not bytes")
        return pattern
    if not isinstance(pattern, str):
        raise InvalidTypeError(
            f"pattern must be a str (a regular expression), not {type(pattern).__name__}"
        )
    try:
        return re.compile(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise InvalidArgumentError(
            f"pattern {pattern!r} is not a valid regular expression: {exc}"
        ) from None


class TableWatch:
    """The names of the namespace's tables that ``pattern`` fully matches, from a children watch
    on the tables znode. ``take`` hands the consumer the newest names once after each change of
    the namespace's tables (a table dropped and created again under its name included)."""

    def __init__(self, ctx: Context, pattern: re.Pattern[str], wake: Callable[[], None]) -> None:
        self.pattern = pattern
        self._ctx = ctx
        self._wake = wake
        self._lock = threading.Lock()
        self._news: list[str] | None = None
        self._watch = ctx.store.watch_children(ctx.paths.tables, self._on_tables, debounce=DEBOUNCE)

    def matching(self, names: list[str]) -> list[str]:
        return [name for name in names if self.pattern.fullmatch(name)]

    def _on_tables(self, names: list[str] | None) -> None:
        """On the store's watch thread."""
        with self._lock:
            # None: the tables znode went (namespace deleted)
            self._news = self.matching(valid_table_names(self._ctx, names or []))
        self._wake()

    @property
    def changed(self) -> bool:
        """Whether a change waits for ``take``."""
        return self._news is not None

    def take(self) -> list[str] | None:
        """The matching names as of the newest change not taken yet; None when none."""
        with self._lock:
            news, self._news = self._news, None
        return news

    def close(self) -> None:
        self._watch.remove()
