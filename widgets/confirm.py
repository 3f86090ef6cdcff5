"""A button for a destructive action that asks first: a click turns it into "Confirm …?" and
Cancel, and only Confirm runs the action (docs/panels.md)."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as w
import traitlets

from .base import button

__all__ = ["ConfirmButton", "Prepared"]

Prepared = tuple[str | None, Callable[[], None]]
"""What a click prepares: the question to ask (None: nothing to confirm, run at once) and the
action, bound to what was chosen when the button was clicked."""

HIDDEN, SHOWN = "none", ""


class ConfirmButton(w.HBox):
    """A button whose click asks before acting: ``prepare()`` gives the question and the action
    (bound to what the user chose then); the button gives way to "<question>" and Cancel until
    one is clicked. A question of None runs the action at once (a dry run, say).

    Arguments:
        description: the button's label ("Drop", "Execute", "Run retention").
        prepare: called on a click; returns ``(question, action)``.
        style: the button's style ("danger", "warning", ...).
        tooltip: the button's tooltip.
        disabled: whether the button starts disabled.
    """

    asking = traitlets.Bool(False, help="whether the question is shown, waiting for an answer")
    question = traitlets.Unicode("", help="the question shown while asking")

    def __init__(
        self,
        description: str,
        prepare: Callable[[], Prepared],
        *,
        style: str = "danger",
        tooltip: str = "",
        disabled: bool = False,
    ) -> None:
        super().__init__()
        self.add_class("leasekit-confirm")
        self._prepare = prepare
        self._pending: Callable[[], None] | None = None
        self.button = button(description, self._clicked, style=style, tooltip=tooltip)
        self.button.disabled = disabled
        self.confirm = button("Confirm", self._confirmed, style="danger")
        self.confirm.add_class("leasekit-confirm-yes")
        self.cancel = button("Cancel", self.withdraw)
        self.cancel.add_class("leasekit-confirm-no")
        self.children = [self.button, self.confirm, self.cancel]
        self.observe(self._show, "asking")
        self._show()

    def _clicked(self) -> None:
        question, action = self._prepare()
        if question is None:
            action()
            return
        self._pending = action
        self.question = question
        self.confirm.description = question
        self.asking = True

    def _confirmed(self) -> None:
        action, self._pending = self._pending, None
        self.asking = False
        if action is not None:
            action()

    def withdraw(self) -> None:
        """Drop the question (Cancel, or what it asked about changed): nothing runs."""
        self._pending = None
        self.asking = False

    def _show(self, change: object = None) -> None:
        self.button.layout.display = HIDDEN if self.asking else SHOWN
        for b in (self.confirm, self.cancel):
            b.layout.display = SHOWN if self.asking else HIDDEN
