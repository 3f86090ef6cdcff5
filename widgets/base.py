"""What every panel shares: the first load on display, live refresh from the ZooKeeper watches
on what it showed (``leasekit.live``), errors and freshness shown inside the panel, and a
``close()`` that leaves no watch or thread behind."""

from __future__ import annotations

import html
import logging
import re
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import ipywidgets as w
import traitlets

from leasekit.errors import LeasekitError, ZooKeeperUnavailableError
from leasekit.live import Follow, LiveView, freshness

__all__ = ["Panel", "esc", "html_table", "button", "static_bundle"]

log = logging.getLogger("leasekit.widgets")

REFRESH_ERROR = "leasekit-error leasekit-refresh-error"

STALE_CLASS = "leasekit-stale"
"""The class a panel carries while what it shows may be out of date: its content is dimmed."""
_STALE_CSS = (
    f"<style>.{STALE_CLASS} > :not(.leasekit-status):not(.leasekit-message)"
    "{opacity:.45;filter:grayscale(.6)}</style>"
)


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


def static_bundle(view: Any, html: str, text: str) -> dict[str, Any]:
    """A widget's mime bundle with its static rendering beside its view: ``text/html`` (what a
    reader without the kernel sees: nbconvert takes it when the notebook saved no widget state,
    JupyterLab when it does not trust the notebook) and a short ``text/plain``.

    Arguments:
        view: the widget's own bundle (its ``application/vnd.jupyter.widget-view+json``).
        html: the static rendering.
        text: the plain text.
    """
    out = dict(view or {})
    out["text/html"] = html
    out["text/plain"] = text
    return out


def button(
    description: str,
    on_click: Callable[[], None],
    *,
    style: str = "",
    tooltip: str = "",
    disabled: bool = False,
) -> w.Button:
    """A button that calls ``on_click()`` when clicked."""
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
    """A panel over one connection: subclasses implement ``_load()`` (reads only: returns what
    to show, runs on any thread) and ``_show(data)`` (trait assignments only), and say in
    ``FOLLOW`` which changes of what they read matter (``leasekit.live.Follow``).

    Building a panel reads nothing: the first load happens when it is displayed or on
    ``refresh()``. With ``auto_refresh`` a change of any znode the last refresh read schedules
    a refresh on the panel's own thread, gathering a burst of changes into one; nothing is ever
    printed or displayed from that thread. The panel says when it last refreshed and whether
    ZooKeeper answers (``refreshed_at``, ``connected``, ``stale``).

    Arguments:
        conn: the Connection the panel shows.
        auto_refresh: follow ZooKeeper changes (the ``auto_refresh`` trait).
        **kwargs: passed on to ``ipywidgets.VBox``.
    """

    FOLLOW: Follow = "all"

    auto_refresh = traitlets.Bool(True, help="refresh when ZooKeeper data shown here changes")
    refreshed_at = traitlets.Instance(
        datetime, allow_none=True, help="when the last refresh that worked ended (UTC)"
    )
    connected = traitlets.Bool(True, help="whether the ZooKeeper session is up")
    stale = traitlets.Bool(False, help="whether what is shown may be out of date")
    last_error = traitlets.Unicode("", help="why the last refresh failed; empty if it worked")
    refreshes = traitlets.Int(0, help="refreshes done (for tests and benchmarks)")

    def __init__(self, conn: Any, *, auto_refresh: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("leasekit-panel")
        self.message = w.HTML()
        self.message.add_class("leasekit-message")
        self.status = w.HTML()
        self.status.add_class("leasekit-status")
        self._lock = threading.RLock()
        self._loaded = False
        self._closed = False
        self.conn = conn
        self.set_trait("auto_refresh", auto_refresh)
        self.set_trait("connected", self._live.connected)
        self._show_status()
        self.observe(self._on_auto_refresh, "auto_refresh")
        self.observe(self._show_status, ["refreshed_at", "connected", "stale"])
        self.observe(self._show_refresh_error, "last_error")

    @property
    def conn(self) -> Any:
        """The Connection shown; assigning another one moves the panel (and its watches) to it."""
        return self._conn

    @conn.setter
    def conn(self, conn: Any) -> None:
        with self._lock:
            old: LiveView | None = getattr(self, "_live", None)
            self._conn = conn
            self._live = LiveView(
                conn,
                self._changed_elsewhere,
                on_state=self._session_changed,
                follow=self.FOLLOW,
                name=f"leasekit-panel-{type(self).__name__}",
            )
        if old is not None:
            old.close()  # outside the lock: a refresh it runs may be waiting for it
            if old.following:
                self._follow(read_now=True)

    # -- to implement -----------------------------------------------------------------------

    def _load(self) -> Any:
        raise NotImplementedError

    def _show(self, data: Any) -> None:
        raise NotImplementedError

    def _ticking(self) -> None:
        """Start what else runs while following (a panel's local ticking)."""

    def _static(self) -> list[str]:
        """What the panel shows besides its message and status, as HTML pieces (called with
        the panel's lock held)."""
        raise NotImplementedError

    # -- refresh ----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read from ZooKeeper and show it now (the first call also starts following changes
        when ``auto_refresh`` is on). A failure never raises: it is shown inside the panel and
        kept in ``last_error``, and the panel is marked ``stale``.

        Raises:
            Nothing: every error is shown inside the panel.
        """
        with self._lock:
            if self._closed:
                return
            if not self._loaded:
                self._loaded = True
                if self.auto_refresh:
                    self._follow(read_now=False)
            try:
                self._live.read(self._load, then=self._show)
            except Exception as exc:  # shown, never raised into the kernel from a watch thread
                if not isinstance(exc, LeasekitError):
                    log.exception("refresh of %s failed", type(self).__name__)
                self._failed(exc)
                return
            with self.hold_trait_notifications():
                self.refreshes += 1
                self.refreshed_at = self._live.refreshed_at
                self.connected = self._live.connected
                self.stale = False
                self.last_error = ""

    def _load_once(self) -> None:
        """The first load, when the panel is first displayed (nothing if it loaded already)."""
        if not self._loaded:
            self.refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The widget's view with its static rendering beside it (``text/html``): a notebook
        saved without widget state still shows what the panel showed (docs/panels.md)."""
        self._load_once()
        view = super()._repr_mimebundle_(**kwargs)
        return static_bundle(view, self.to_html(), repr(self))

    def to_html(self) -> str:
        """What the panel shows now as self-contained static HTML: its tables with the cell
        text they show, its charts as images, its message and how fresh it is; no script, all
        user text escaped. A panel never shown loads first, as on display.

        Returns:
            An HTML fragment (a ``<div>``).

        Raises:
            Nothing: a failed load is shown inside, as in the panel.
        """
        self._load_once()
        with self._lock:
            parts = self._static()
            message, status = self.message.value, self.status.value
        now = datetime.now(timezone.utc)
        kind = type(self).__name__
        status = re.sub(r"<style>.*?</style>", "", status, flags=re.S)  # the live panel's CSS
        return (
            f'<div class="leasekit-static leasekit-static-{esc(kind.lower())}" '
            'style="font-family:sans-serif;font-size:13px">'
            f'<div class="leasekit-status">{status} <span style="color:#888;font-size:85%">'
            f"· static view of the {esc(kind)} as of {now:%Y-%m-%d %H:%M:%S} UTC</span></div>"
            + (f'<div class="leasekit-message">{message}</div>' if message else "")
            + "".join(parts)
            + "</div>"
        )

    def _failed(self, exc: BaseException) -> None:
        with self.hold_trait_notifications():
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.connected = self._live.connected
            self.stale = True
        self._show_refresh_error()  # also when the same error comes again
        self._show_status()  # the age of what is shown grows with each retry

    def _follow(self, *, read_now: bool) -> None:
        self._live.follow_changes(True, read_now=read_now)
        self._ticking()

    def _changed_elsewhere(self) -> None:
        if self.auto_refresh and not self._closed:
            self.refresh()

    def _session_changed(self, up: bool) -> None:
        """The session came back (read again at once) or went down (what is shown is stale)."""
        if up and self.auto_refresh and self._loaded and not self._closed:
            self.refresh()  # on the view's thread; also re-arms the retries if it fails
            return
        with self.hold_trait_notifications():
            self.connected = up
            if not up:
                self.stale = True

    def _on_auto_refresh(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self._follow(read_now=True)
        else:
            self._live.follow_changes(False)

    # -- views of the state -----------------------------------------------------------------

    def _show_status(self, change: Any = None) -> None:
        """The freshness line at the top of the panel; while the data may be out of date it is
        a red notice and the rest of the panel is dimmed (``STALE_CLASS``)."""
        text = freshness(self.refreshed_at, self.connected, failed=self.stale)
        if self.stale or not self.connected:
            self.add_class(STALE_CLASS)
            self.status.value = (
                f"{_STALE_CSS}<div style='background:#fdecea;color:#b00020;padding:2px 8px;"
                f"border-left:4px solid #b00020;font-size:90%'>{esc(text)}; retrying</div>"
            )
        else:
            self.remove_class(STALE_CLASS)
            self.status.value = f'<span style="color:#666;font-size:90%">{esc(text)}</span>'

    def _show_refresh_error(self, change: Any = None) -> None:
        if self.last_error:
            self.message.value = (
                f'<span class="{REFRESH_ERROR}" style="color:#b00020">could not read: '
                f"{esc(self.last_error)}</span>"
            )
        elif self.message.value.startswith(f'<span class="{REFRESH_ERROR}"'):
            self.message.value = ""  # the last refresh's error is over (an action's stays)

    # -- actions ----------------------------------------------------------------------------

    def act(
        self, what: str, action: Callable[[], object], done: Callable[[Any], str] | None = None
    ) -> Any:
        """Run a user action (a button's), show its outcome or error, then refresh.

        Arguments:
            what: the action, as the message names it.
            action: does it; its result goes to ``done``.
            done: the message shown after success (default ``"<what>: done"``).

        While it runs, the panel's enabled buttons are disabled and the message says what runs;
        when ZooKeeper is unreachable the action is not tried and the message says so at once.

        Returns:
            The action's result, None when it failed (the error is shown in the panel).
        """
        if not self._live.connected:
            with self.hold_trait_notifications():
                self.connected = False
                self.stale = True
            unreachable = ZooKeeperUnavailableError(
                "ZooKeeper is unreachable; nothing was changed, try again once it is back"
            )
            self.error(unreachable, what)
            return None
        busy = [b for b in _descendants(self) if isinstance(b, w.Button) and not b.disabled]
        for b in busy:
            b.disabled = True  # sent to the browser at once: no second click meanwhile
        self.message.value = f'<span class="leasekit-busy">{esc(what)}: running…</span>'
        try:
            result = action()
        except (LeasekitError, ValueError, TypeError) as exc:
            self.error(exc, what)
            return None
        except Exception as exc:
            log.exception("%s failed", what)
            self.error(exc, what)
            return None
        finally:
            for b in busy:
                b.disabled = False  # as before: the panel's own rules apply again after this
        self.refresh()
        self.info(done(result) if done is not None else f"{what}: done")
        return result

    def info(self, text: str) -> None:
        """Show ``text`` as the panel's message (HTML-escaped).

        Arguments:
            text: the message.
        """
        self.message.value = f'<span class="leasekit-info">{esc(text)}</span>'

    def error(self, exc: BaseException, what: str) -> None:
        """Show ``exc`` as the error of the action ``what``, inside the panel (HTML-escaped).

        Arguments:
            exc: the error the action raised.
            what: the action, as the user named it ("Renew", "Drop", ...).
        """
        self.message.value = (
            f'<span class="leasekit-error leasekit-action-error" style="color:#b00020">'
            f"{esc(what)} failed: {esc(type(exc).__name__)}: {esc(exc)}</span>"
        )

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop live refresh: unregister every watch, end the panel's thread, close its
        widgets. Twice is a no-op.

        Raises:
            Nothing: a ZooKeeper that is gone only means there is no watch left to remove.
        """
        with self._lock:
            self._closed = True
        self._live.close()  # outside the lock: a refresh it runs may be waiting for it
        for child in _descendants(self):
            child.close()
        super().close()

    @property
    def watched(self) -> int:
        """ZooKeeper watches this panel holds now."""
        return self._live.watched


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
