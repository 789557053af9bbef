"""Adversarial: a renamed column's hierarchy must be deleted whatever command renamed it
(anon._forget_renamed_hierarchies deletes rows of the relation the command reports). A
partition's or an inheritance child's column renamed through its parent (ALTER TABLE parent
RENAME COLUMN recurses; pg_event_trigger_ddl_commands reports the parent alone) keeps the old
column's values under the old name, handed to the next column of that name (for a partition: the
next one added to the parent).

Reproduction (psql, as a superuser):
    CREATE TABLE base (id int, salary int) PARTITION BY RANGE (id);
    CREATE TABLE pay PARTITION OF base FOR VALUES FROM (0) TO (100);
    INSERT INTO base SELECT i, 30000 + i * 37 FROM generate_series(1, 30) i;
    SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[1000, 10000]);
    ALTER TABLE base RENAME COLUMN salary TO withdrawn;
    SELECT leaf FROM anon.hierarchies WHERE source = 'pay'::regclass;   -- still the 30 salaries
"""
from __future__ import annotations

import pytest

SALARIES = {str(30000 + i * 37) for i in range(1, 31)}

CASES = {
    "inheritance child": (
        ("CREATE TABLE base (id int, salary int); CREATE TABLE pay () INHERITS (base); "
        "INSERT INTO pay SELECT i, 30000 + i * 37 FROM generate_series(1, 30) i"),
        "pay", "ALTER TABLE base RENAME COLUMN salary TO withdrawn"),
    "partition": (
        ("CREATE TABLE base (id int, salary int) PARTITION BY RANGE (id); "
        "CREATE TABLE pay PARTITION OF base FOR VALUES FROM (0) TO (100); "
        "INSERT INTO base SELECT i, 30000 + i * 37 FROM generate_series(1, 30) i"),
        "pay", "ALTER TABLE base RENAME COLUMN salary TO withdrawn"),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_a_renamed_columns_values_leave_the_hierarchy_catalog_whatever_renamed_it(db, schema, kind):
    create, source, rename = CASES[kind]
    for statement in create.split("; "):
        db.execute(statement)
    db.execute("SELECT anon.set_hierarchy_intervals(%s, 'salary', ARRAY[1000, 10000])", (source,))
    oid = db.execute("SELECT %s::regclass::oid", (source,)).fetchone()[0]
    leaves = "SELECT leaf FROM anon.hierarchies WHERE source::oid = %s"
    assert {leaf for (leaf,) in db.execute(leaves, (oid,))} == SALARIES
    db.execute(rename)
    kept = {leaf for (leaf,) in db.execute(leaves, (oid,))}
    assert not kept & SALARIES, f"{len(kept & SALARIES)} values of the renamed column kept"
