"""leasekit.widgets: ipywidgets panels for an overview, leases, consumer lag and retention,
refreshed live from ZooKeeper watches.

Installed as ``leasekit.widgets`` (see ``package-dir`` in pyproject.toml); the only
package of leasekit that imports ipywidgets.
"""

from __future__ import annotations

from .consumers import ConsumerPanel
from .dashboard import Dashboard
from .lagchart import lag_chart
from .leases import LeasePanel
from .overview import OverviewPanel
from .retention import RetentionPanel
from .svgchart import TimeChart

__all__ = [
    "OverviewPanel",
    "LeasePanel",
    "ConsumerPanel",
    "RetentionPanel",
    "Dashboard",
    "lag_chart",
    "TimeChart",
]
