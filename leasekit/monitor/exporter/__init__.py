"""The Prometheus exporter (M5): metrics of one or more namespaces built on each scrape from the
lag and lease readings, a background pass per namespace for the heavy figures, and the HTTP
server (text format or OpenMetrics); it sits above ``lag`` and ``leases``."""
