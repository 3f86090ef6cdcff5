"""Tables: names, schemas and Spark DDL, bucketing, the catalog (create, load, list, drop)
and the ``Table`` handle users hold."""
