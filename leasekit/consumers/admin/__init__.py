"""Administration of consumer groups, from outside them: list, describe (lag and lag health),
members, status, offset resets and deletions (``group_admin`` is the one entry point)."""
