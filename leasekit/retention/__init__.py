"""Retention: gather what exists, plan every keep and delete with its reason (a pure
function), and apply a plan, metadata first and files after."""
