"""The Prometheus exporter (M5): metrics built on each scrape from the lag and lease readings, a
background pass for the heavy figures, and the HTTP server; it sits above ``lag`` and ``leases``."""
