"""Administration of consumer groups, from outside them: list, describe (lag and lag health),
members, status, offset resets and deletions (``group_admin`` is the one entry point), and
``read_changes``, a read of the change log that commits for a group with no live member."""
