"""The embedded standalone ZooKeeper server (run from the jars the pyspark wheel ships) and
Java discovery for it and for Spark."""

from __future__ import annotations

from .server import MAIN_CLASS, ServerStatus, ensure_running, four_letter, kill, status, stop

__all__ = ["MAIN_CLASS", "ServerStatus", "ensure_running", "four_letter", "kill", "status", "stop"]
