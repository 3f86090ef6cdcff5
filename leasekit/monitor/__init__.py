"""Monitoring of a namespace, by job: the lag of consumer groups and its history (``lag``), the
lease inventory (``leases``), and the Prometheus exporter that reads both (``exporter``)."""
