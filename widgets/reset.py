"""The reset-offsets form of the consumer panel: nothing chosen until the user chooses, a
dry-run preview of exactly what would change, then execute after a confirmation — which
applies exactly the offsets previewed, or is refused when they changed since (or while members
live)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w
import traitlets

from leasekit import TableBucket
from leasekit.errors import InvalidArgumentError
from leasekit.live import parse_duration, parse_timestamp

from .base import button, esc, html_table
from .confirm import ConfirmButton, Prepared

__all__ = ["ResetForm", "reset_arguments"]

TARGETS = [
    ("choose…", ""),
    ("to earliest", "earliest"),
    ("to latest", "latest"),
    ("to offset", "offset"),
    ("to date-time (ISO 8601)", "datetime"),
    ("by duration (e.g. 1h)", "duration"),
    ("shift by", "shift"),
]


def reset_arguments(kind: str, text: str) -> dict[str, Any]:
    """``reset_offsets`` keywords for a target chosen in the form.

    Arguments:
        kind: the target's value in TARGETS ("earliest", "offset", "duration"...).
        text: what the user typed for it (an offset, a date-time, a duration or a shift).

    Returns:
        ``to=`` or ``shift_by=`` for ``Connection.reset_offsets``.

    Raises:
        InvalidArgumentError: no target chosen, or ``text`` is not a value of its kind.
        InvalidDurationError: a duration that does not parse.
    """
    text = text.strip()
    if not kind:
        raise InvalidArgumentError("choose what to reset to")
    if kind in ("earliest", "latest"):
        return {"to": kind}
    if kind == "datetime":
        return {"to": parse_timestamp(text, what="date-time")}
    if kind == "duration":
        return {"to": parse_duration(text, what="duration")}
    try:
        number = int(text)
    except ValueError:
        raise InvalidArgumentError(
            f"{'offset' if kind == 'offset' else 'shift'} {text!r} is not a whole number"
        ) from None
    return {"to": number} if kind == "offset" else {"shift_by": number}


class ResetForm(w.VBox):
    """The reset-offsets form of one group.

    Arguments:
        run: ``Connection.reset_offsets`` (or a function taking the same arguments).
        act: runs a user action and shows its outcome or error (``Panel.act``).
    """

    group = traitlets.Unicode(None, allow_none=True, help="the group whose offsets are reset")
    members = traitlets.Int(0, help="the group's live members (a reset is refused while any)")

    def __init__(self, run: Callable[..., Any], act: Callable[..., Any]) -> None:
        super().__init__()
        self.add_class("leasekit-reset")
        self._run = run
        self._act = act
        self._previewed: tuple[Any, ...] | None = None
        self._plan: Any = None
        self._changed: list[str] = []
        self.target = w.Dropdown(options=TARGETS, value="", description="Reset")
        self.value = w.Text(
            placeholder="offset, date-time, duration or shift", layout=w.Layout(width="220px")
        )
        self.buckets = w.SelectMultiple(
            options=[], rows=6, description="Buckets", layout=w.Layout(width="300px")
        )
        self.select_all = button("Select all", self._all)
        self.preview_button = button(
            "Preview", self._preview, tooltip="dry run: shows the plan, changes nothing"
        )
        self.execute_confirm = ConfirmButton(
            "Execute",
            self._ask_execute,
            style="danger",
            tooltip="apply exactly the offsets previewed (asks first)",
            disabled=True,
        )
        self.execute = self.execute_confirm.button
        self.reason = w.HTML()
        self.preview = w.HTML()
        for widget in (self.target, self.value, self.buckets):
            widget.observe(lambda _: self._inputs_changed(), "value")
        self.children = [
            w.HTML("<b>Reset offsets</b>"),
            w.HBox([self.target, self.value]),
            w.HBox(
                [self.buckets, w.VBox([self.select_all, self.preview_button, self.execute_confirm])]
            ),
            self.reason,
            self.preview,
        ]
        self._inputs_changed()

    def show(
        self,
        group: str | None,
        buckets: list[TableBucket],
        members: int,
        committed: dict[TableBucket, int | None] | None = None,
    ) -> None:
        """Show the group's buckets and live member count (choices the user made stay while
        they are valid), and whether the preview shown still matches the committed offsets.

        Arguments:
            group: the group, None when there is none.
            buckets: its buckets, in the order to list them.
            members: its live members now.
            committed: the committed offset of each bucket now (None: never committed), to
                tell a preview that went out of date; None: not known.
        """
        if group != self.group:
            self.group = group
            self.buckets.value = ()
            self._forget()
        self.members = members
        chosen = tuple(tb for tb in self.buckets.value if tb in set(buckets))
        self.buckets.options = [(f"{tb.table}/{tb.bucket}", tb) for tb in buckets]
        self.buckets.value = chosen
        self._changed = [] if committed is None else self._moved(committed)
        self._inputs_changed()

    def _moved(self, committed: dict[TableBucket, int | None]) -> list[str]:
        """The buckets of the preview whose committed offset is no longer the one previewed."""
        if self._plan is None or self._previewed is None:
            return []
        out = []
        for r in self._plan.itertuples():
            tb = TableBucket(r.table, int(r.bucket))
            was = None if _missing(r.current_offset) else int(r.current_offset)
            if tb in committed and committed[tb] != was:
                out.append(f"{tb.table}/{tb.bucket}")
        return out

    def _forget(self) -> None:
        self._previewed = None
        self._plan = None
        self._changed = []
        self.preview.value = ""
        self.execute_confirm.withdraw()

    def _key(self) -> tuple[Any, ...]:
        return self.group, self.target.value, self.value.value.strip(), tuple(self.buckets.value)

    def _inputs_changed(self) -> None:
        ready = bool(self.group and self.target.value and self.buckets.value)
        self.preview_button.disabled = not ready or bool(self.members)
        if self.members:
            why = (
                f"Reset is disabled while the group has {self.members} live member"
                f"{'s' if self.members != 1 else ''}: stop its consumers first."
            )
        elif self._previewed != self._key():
            why = "Preview the reset before executing it."
        elif self._changed:
            shown = ", ".join(self._changed[:5]) + (" …" if len(self._changed) > 5 else "")
            why = f"The committed offsets of {shown} changed since the preview: preview again."
        else:
            why = ""
        self.execute.disabled = bool(why)
        if why:
            self.execute_confirm.withdraw()
        self.reason.value = f'<span class="leasekit-reason">{esc(why)}</span>' if why else ""

    def _all(self) -> None:
        self.buckets.value = tuple(tb for _, tb in self.buckets.options)

    def _plan_of(self, dry_run: bool) -> Any:
        kwargs = reset_arguments(self.target.value, self.value.value)
        return self._run(self.group, buckets=list(self.buckets.value), dry_run=dry_run, **kwargs)

    def _preview(self) -> None:
        key = self._key()
        plan = self._act(
            "preview the reset",
            lambda: self._plan_of(dry_run=True),
            lambda p: f"dry run: {len(p)} offsets would be reset, nothing changed",
        )
        if plan is not None:
            self._previewed, self._plan, self._changed = key, plan, []
            self._render(plan, "Dry run: nothing changed yet.")
        self._inputs_changed()

    def _ask_execute(self) -> Prepared:
        group, plan = self.group, self._plan
        n = 0 if plan is None else len(plan)
        return (
            f"Confirm reset of {n} offset{'s' if n != 1 else ''} of {group}?",
            lambda: self._execute(group, plan),
        )

    def _execute(self, group: str | None, plan: Any) -> None:
        done = self._act(
            "reset offsets",
            lambda: self._run(group, plan=plan, dry_run=False),
            lambda p: f"{len(p)} offsets reset as previewed",
        )
        if done is not None:
            self._forget()
            self._render(done, "Offsets reset.")
        else:  # refused (changed since, a member joined...): a new preview is needed
            self._previewed = None
            self._plan = None
        self._inputs_changed()

    def _render(self, plan: Any, head: str) -> None:
        rows = [
            [
                r.table,
                r.bucket,
                "-" if _missing(r.current_offset) else r.current_offset,
                r.new_offset,
            ]
            for r in plan.itertuples()
        ]
        self.preview.value = (
            f"<div>{esc(head)} {len(rows)} bucket{'s' if len(rows) != 1 else ''}.</div>"
            + html_table(
                ["table", "bucket", "current offset", "new offset"], rows, css="leasekit-reset-plan"
            )
        )


def _missing(value: Any) -> bool:
    return value is None or str(value) in ("<NA>", "nan", "NaN")
