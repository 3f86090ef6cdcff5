"""The coordinator a consumer gets: a group's (``coordinator``) or, without a group_id, one of
its own (``no_group``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from . import offsets as stored
from .coordinator import GroupCoordinator
from .no_group import NoGroupCoordinator

if TYPE_CHECKING:
    from ..context import Context
    from .assignors import Assignor
    from .options import ConsumerOptions
    from .subscription import SubscriptionState

__all__ = ["coordinator_for"]


def coordinator_for(
    ctx: Context,
    group_id: str | None,
    subscription: SubscriptionState,
    options: ConsumerOptions,
    assignor: Assignor,
    wake: Callable[[], None],
) -> GroupCoordinator | NoGroupCoordinator:
    """The coordinator of a consumer with ``group_id`` (checked: ``InvalidArgumentError``), or
    one of a consumer without a group when it is None."""
    if group_id is None:
        return NoGroupCoordinator(ctx, subscription, wake, parent_first=options.parent_first)
    return GroupCoordinator(
        ctx, stored.check_group_id(group_id), subscription, options, assignor=assignor, wake=wake
    )
