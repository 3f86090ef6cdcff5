"""Monitoring of a namespace: every consumer group read in one pipelined pass, the lag history
sampled into an internal table, group overviews with rates, ETA and retention risk."""
