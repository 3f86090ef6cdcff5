"""Monitoring: the lease inventory, the Prometheus metrics of groups, leases and retention,
and what they are read from."""
