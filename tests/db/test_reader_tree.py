"""A source made of several relations is read through its root, the one name the guard keeps from
being renamed: a member named in the read could be swapped, between the guard's check and the
read, for another role's table whose index predicate the read's planning runs (found by review:
a custodian renamed a child's schema and became superuser through the DBA's anon.sweep)."""
from __future__ import annotations

import ast

import pytest

from tests.helpers import notices


@pytest.mark.parametrize("tree", ["inheritance", "partitions"])
def test_a_tree_is_read_through_its_root_never_by_a_members_name(db, schema, tree):
    db.execute("CREATE SCHEMA IF NOT EXISTS kids_elsewhere")
    if tree == "inheritance":
        db.execute("CREATE TABLE root (id int, age int); CREATE TABLE kids_elsewhere.kid () INHERITS (root)")
    else:
        db.execute("CREATE TABLE root (id int, age int) PARTITION BY RANGE (id); "
                   "CREATE TABLE low PARTITION OF root FOR VALUES FROM (0) TO (100); "
                   "CREATE TABLE kids_elsewhere.kid PARTITION OF root FOR VALUES FROM (100) TO (200)")
    db.execute("INSERT INTO root SELECT g, g % 50 FROM generate_series(1, 150) g")
    db.execute("SELECT * FROM anon.versions()")              # the backend's environment is active
    seen = notices(db)
    try:
        db.execute(f"""DO LANGUAGE plpython3u $$
from plpy_anon.db import guards, reader
plan, several = reader.read_plan(plpy, guards.table(plpy, '{schema}.root'))
plpy.notice(repr(plan))
data = reader.read_columns(plpy, guards.table(plpy, '{schema}.root'), [], [])
plpy.notice(repr(data.n_rows))
$$""")
        plan = ast.literal_eval(seen[0])
        assert [name for name, _blocks in plan] == [f"{schema}.root"]       # the root, without ONLY
        assert "kid" not in seen[0]
        assert seen[1] == "150"                                           # every member's rows
    finally:
        db.execute("DROP TABLE IF EXISTS root CASCADE; DROP SCHEMA kids_elsewhere CASCADE")
