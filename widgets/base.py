"""What every panel shares: loading in the background, live refresh from the ZooKeeper watches
on what it showed (debounced), errors shown inside the panel, and a ``close()`` that leaves
no watch or thread behind."""

from __future__ import annotations

import html
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import ipywidgets as w
import traitlets

from leasekit.errors import LeasekitError
from leasekit.zk.watches import Dispatcher

__all__ = ["Panel", "esc", "html_table", "button"]

log = logging.getLogger("leasekit.widgets")

DEBOUNCE = 0.25
"""Seconds a burst of ZooKeeper changes is gathered into one refresh."""

REFRESH_ERROR = "leasekit-error leasekit-refresh-error"

STALE_AFTER = 30.0
"""Seconds after which a panel reads again although nothing it watches changed (time lags,
ages and statuses move with the clock alone)."""


def esc(value: object) -> str:
    """``value`` as text that HTML shows as written."""
    return html.escape("" if value is None else str(value), quote=True)


def html_table(columns: list[str], rows: Iterable[Iterable[object]], *, css: str = "") -> str:
    """An HTML table of escaped cells (cells already made HTML are passed as ``Markup``)."""
    cell = 'style="padding:2px 10px;border-bottom:1px solid #ddd;text-align:left"'
    head = "".join(f"<th {cell}>{esc(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(f"<td {cell}>{c if isinstance(c, Markup) else esc(c)}</td>" for c in row)
        + "</tr>"
        for row in rows
    )
    return (
        f'<table class="leasekit-table {esc(css)}" style="border-collapse:collapse">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


class Markup(str):
    """Text that is HTML already (built from escaped pieces)."""


def button(
    description: str,
    on_click: Callable[[], None],
    *,
    style: str = "",
    tooltip: str = "",
    disabled: bool = False,
) -> w.Button:
    b = w.Button(
        description=description,
        button_style=style,
        tooltip=tooltip,
        disabled=disabled,
        layout=w.Layout(width="auto"),
    )
    b.on_click(lambda _: on_click())
    return b


class Panel(w.VBox):
    """A panel over one connection. Subclasses implement ``_load()`` (reads only: returns what
    to show, runs on any thread) and ``_show(data)`` (trait assignments only), and list the
    paths to watch in ``_watch_filter``.

    ``refresh()`` reads and shows now. With ``auto_refresh`` (on by default) a change of any
    znode the last refresh read schedules a refresh on the panel's own thread, gathering the
    changes of ``DEBOUNCE`` seconds; nothing is ever printed or displayed from that thread.
    """

    auto_refresh = traitlets.Bool(True, help="refresh when ZooKeeper data shown here changes")

    def __init__(self, conn: Any, *, auto_refresh: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn = conn
        self.add_class("leasekit-panel")
        self.message = w.HTML(layout=w.Layout(min_height="1.5em"))
        self.message.add_class("leasekit-message")
        self._lock = threading.RLock()
        self._worker = Dispatcher(name=f"leasekit-panel-{type(self).__name__}")
        self._watches: Any = None
        self._closed = False
        self.refreshes = 0
        """Refreshes done (for tests and benchmarks)."""
        self.set_trait("auto_refresh", auto_refresh)
        self.observe(self._on_auto_refresh, "auto_refresh")

    # -- to implement -----------------------------------------------------------------------

    def _load(self) -> Any:
        raise NotImplementedError

    def _show(self, data: Any) -> None:
        raise NotImplementedError

    def _watch_filter(self, data: set[str], children: set[str]) -> tuple[set[str], set[str]]:
        """Which of the paths read to watch (all by default)."""
        return data, children

    # -- refresh ----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read from ZooKeeper and show it now; an error is shown inside the panel."""
        if self._closed:
            return
        with self._lock:
            try:
                with self.conn.store.recording() as seen:
                    data = self._load()
                self._show(data)
                self.refreshes += 1
                if self.message.value.startswith(f'<span class="{REFRESH_ERROR}"'):
                    self.message.value = ""  # the last refresh's error is over (an action's stays)
            except LeasekitError as exc:
                self.error(exc)
                return
            except Exception as exc:  # shown, never raised into the kernel from a watch thread
                log.exception("refresh of %s failed", type(self).__name__)
                self.error(exc)
                return
            if self.auto_refresh:
                self._rewatch(seen.data, seen.children)
                self._worker.submit("stale", self._stale, STALE_AFTER)

    def _rewatch(self, data: set[str], children: set[str]) -> None:
        """Watch what was read (under the panel's lock, so close() cannot race it)."""
        if not self.auto_refresh or self._closed:
            return
        if self._watches is None:
            self._watches = self.conn.store.watch_set(self._changed)
        if self._watches.update(*self._watch_filter(data, children)):
            self._changed(None)  # newly watched: a change before its watch was set is read now

    def _changed(self, path: str | None) -> None:
        """A watched znode changed (on kazoo's thread): schedule one refresh for the burst."""
        if not self._closed and self.auto_refresh:
            self._worker.submit("refresh", self.refresh, DEBOUNCE)

    def _stale(self) -> None:
        if self.auto_refresh and not self._closed:
            self.refresh()

    def _on_auto_refresh(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self._worker.submit("refresh", self.refresh, 0.0)
            self._live()
        else:
            with self._lock:
                if self._watches is not None:
                    self._watches.close()
                    self._watches = None

    def _live(self) -> None:
        """Start what else runs while ``auto_refresh`` is on (a panel's local ticking)."""

    # -- actions ----------------------------------------------------------------------------

    def act(
        self, what: str, action: Callable[[], object], done: Callable[[Any], str] | None = None
    ) -> Any:
        """Run a user action (a button's), show its outcome or error, then refresh; the
        action's result, None when it failed."""
        try:
            result = action()
        except (LeasekitError, ValueError, TypeError) as exc:
            self.error(exc, what)
            return None
        except Exception as exc:
            log.exception("%s failed", what)
            self.error(exc, what)
            return None
        self.refresh()
        self.info(done(result) if done is not None else f"{what}: done")
        return result

    def info(self, text: str) -> None:
        self.message.value = f'<span class="leasekit-info">{esc(text)}</span>'

    def error(self, exc: BaseException, what: str = "") -> None:
        """Show ``exc`` as text: of the action ``what``, or of reading when ``what`` is empty."""
        css = "leasekit-error leasekit-action-error" if what else REFRESH_ERROR
        prefix = f"{what} failed: " if what else "could not read: "
        self.message.value = (
            f'<span class="{css}" style="color:#b00020">{esc(prefix)}'
            f"{esc(type(exc).__name__)}: {esc(exc)}</span>"
        )

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop live refresh: unregister every watch and end the panel's thread."""
        with self._lock:
            self._closed = True
            if self._watches is not None:
                self._watches.close()
                self._watches = None
        self._worker.close()  # outside the lock: a refresh it runs may be waiting for it
        for child in _descendants(self):
            child.close()
        super().close()

    @property
    def watched(self) -> int:
        """ZooKeeper watches this panel holds now."""
        return 0 if self._watches is None else self._watches.registered()


def _descendants(widget: w.Widget) -> list[w.Widget]:
    """Every widget inside ``widget`` (children, their children, a Figure's marks and axes)."""
    out: list[w.Widget] = []
    todo = [widget]
    while todo:
        current = todo.pop()
        for name in ("children", "marks", "axes"):
            for child in getattr(current, name, ()) or ():
                if isinstance(child, w.Widget) and child not in out:
                    out.append(child)
                    todo.append(child)
    return out
