"""Dashboard: the overview, lease, consumer and retention panels in tabs, under a header naming
the namespace and the ZooKeeper ensemble they show."""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import traitlets

from .base import esc, static_bundle
from .consumers import ConsumerPanel
from .leases import LeasePanel
from .overview import OverviewPanel
from .retention import RetentionPanel

__all__ = ["Dashboard"]


class Dashboard(w.VBox):
    """OverviewPanel, LeasePanel, ConsumerPanel and RetentionPanel of one connection, in tabs;
    like a panel, it reads nothing until it is displayed or refreshed, and its
    ``auto_refresh`` trait sets every panel's.

    Arguments:
        conn: the Connection shown.
        auto_refresh: whether the panels follow ZooKeeper changes (the ``auto_refresh`` trait).
    """

    auto_refresh = traitlets.Bool(True, help="whether every panel follows ZooKeeper changes")

    def __init__(self, conn: Any, *, auto_refresh: bool = True) -> None:
        super().__init__()
        self.add_class("leasekit-dashboard")
        self.conn = conn
        self.set_trait("auto_refresh", auto_refresh)
        self.header = w.HTML(
            f"<b>leasekit</b> · namespace <code>{esc(conn.namespace)}</code> · ZooKeeper "
            f"<code>{esc(conn.zookeeper)}</code> · warehouse "
            f"<code>{esc(conn.warehouse)}</code>"
        )
        self.header.add_class("leasekit-header")
        self.overview = OverviewPanel(conn, auto_refresh=auto_refresh)
        self.leases = LeasePanel(conn, auto_refresh=auto_refresh)
        self.consumers = ConsumerPanel(conn, auto_refresh=auto_refresh)
        self.retention = RetentionPanel(conn, auto_refresh=auto_refresh)
        self.tabs = w.Tab(
            children=list(self.panels),
            titles=("Overview", "Leases", "Consumers", "Retention"),
        )
        self.children = [self.header, self.tabs]
        self.observe(self._on_auto_refresh, "auto_refresh")

    @property
    def panels(self) -> tuple[OverviewPanel, LeasePanel, ConsumerPanel, RetentionPanel]:
        """The panels, in the order of the tabs."""
        return self.overview, self.leases, self.consumers, self.retention

    def _on_auto_refresh(self, change: dict[str, Any]) -> None:
        for panel in self.panels:
            panel.auto_refresh = change["new"]

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The dashboard's view with its static rendering beside it (``text/html``), as a
        panel's."""
        for panel in self.panels:  # the first display loads every tab
            panel._load_once()
        view = super()._repr_mimebundle_(**kwargs)
        return static_bundle(view, self.to_html(), repr(self))

    def to_html(self) -> str:
        """What every tab shows now, as self-contained static HTML: the header, then each tab
        under its title (each panel's ``to_html``; panels never shown load first).

        Returns:
            An HTML fragment (a ``<div>``).

        Raises:
            Nothing: a failed load is shown inside its panel's rendering.
        """
        tabs = "".join(
            f'<h3 style="margin:14px 0 4px">{esc(title)}</h3>{panel.to_html()}'
            for title, panel in zip(self.tabs.titles, self.panels)
        )
        return (
            f'<div class="leasekit-static leasekit-static-dashboard">'
            f'<div class="leasekit-header">{self.header.value}</div>{tabs}</div>'
        )

    def __repr__(self) -> str:
        return f"Dashboard(namespace={self.conn.namespace!r})"

    def refresh(self) -> None:
        """Refresh every panel now (errors are shown inside each panel).

        Raises:
            Nothing: every error is shown inside its panel.
        """
        for panel in self.panels:
            panel.refresh()

    def close(self) -> None:
        """Close every panel (their watches and threads end) and the dashboard. Twice is a
        no-op.

        Raises:
            Nothing, as ``Panel.close``.
        """
        for panel in self.panels:
            panel.close()
        self.tabs.close()
        self.header.close()
        super().close()
