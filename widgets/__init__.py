"""leasekit.widgets: ipywidgets panels for leases, consumer lag and retention.

Installed as ``leasekit.widgets`` (see ``package-dir`` in pyproject.toml); the only
package of leasekit that imports ipywidgets.
"""

from __future__ import annotations

__all__: list[str] = []
