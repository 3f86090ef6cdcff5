"""The notebooks shipped with leasekit (``*.ipynb`` package data): ``leasekit lab`` copies them
into a working copy and serves that, never these files."""
