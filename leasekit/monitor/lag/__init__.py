"""The lag of consumer groups: every group read in one pipelined pass, sampled into the internal
table ``__lag_history``, and read back (``lag_history``, ``group_overview`` with rates and risk)."""
