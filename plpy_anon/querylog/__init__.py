"""Learning attribute priorities from the analysts' SQL (pure: sqlglot, no database import).

``parse`` (normalize, deduplicate, parse once) -> ``resolve`` (scope walk: which real column is
used in which clause, and with which constants) -> ``priorities`` (counts, weights, cut points).
``logs`` reads PostgreSQL server logs (csvlog and stderr) into statements.
"""
