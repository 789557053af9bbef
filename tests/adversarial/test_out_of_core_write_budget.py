"""Adversarial: the write of an out-of-core release is held to the budget whatever the source.

A release that runs out of core is written with work_mem at a sixteenth of
plpy_anon.build_memory (out_of_core.write_settings; recorded as ``write_work_mem``), decided from
the planner's row estimate (docs/out-of-core.md): for an inheritance parent, the estimate of the
whole tree (the parent's own ``pg_class.reltuples`` is 0 after ANALYZE when the rows live in its
children), else the write would run with the session's work_mem (256MB here) beside the
regions' fits."""
from __future__ import annotations

from tests.helpers import class_sizes, release_schema_of


def test_the_write_of_an_out_of_core_release_of_an_inheritance_parent_is_held_to_the_budget(
        db, schema, connect):
    db.execute("CREATE TABLE t (id int, a int, b int, s text)")
    for child, first in (("t1", 1), ("t2", 10001)):
        db.execute(f"CREATE TABLE {child} () INHERITS (t)")
        db.execute(f"INSERT INTO {child} SELECT i, i % 97, (i * 7919) % 1000, 's' || (i % 5) "
                   f"FROM generate_series({first}, {first + 9999}) i")
    db.execute("ANALYZE t")
    db.execute("ANALYZE t1")
    db.execute("ANALYZE t2")
    with connect(options=f"-c search_path={schema}") as c:
        c.execute("SET plpy_anon.build_memory = '64kB'")
        c.execute("SET work_mem = '256MB'")
        planned = c.execute("EXPLAIN (FORMAT JSON) SELECT * FROM t").fetchone()[0][0]["Plan"]["Plan Rows"]
        rel = c.execute("SELECT anon.mondrian_view('t', 5, quasi_identifiers => ARRAY['a', 'b'], "
                        "sensitive => ARRAY['s'], release_schema => %s)",
                        (release_schema_of(schema),)).fetchone()[0]
    assert planned >= 20000          # the planner counts the children
    out_of_core = db.execute("SELECT metrics -> 'out_of_core' FROM anon.releases WHERE "
                             "format('%%I.%%I', release_schema, release_name) = %s", (rel,)).fetchone()[0]
    assert out_of_core["regions"] > 1
    assert min(class_sizes(db, rel, ["a", "b"])) >= 5
    assert out_of_core["write_work_mem"] == "64kB"      # max(64kB, 64kB / 16)
