"""Adversarial: a custodian replaces its own release's relation by a table of the same name (a
copy of its source, say) that analysts granted the release then read. The catalog row's figures
are the owner's to write, but what the relations are is not: anon.release_audit and
anon.release_status call a release verified only while its relation is what plpy_anon made
(its storage a populated materialized view, the relation analysts read that one or the view over
it), owned by its creator. Found by a review: a table under the release's name, or under its
storage's name below a view of the owner's, was called verified and the release safe."""
from __future__ import annotations

import pytest
from psycopg import sql

from tests.adversarial.conftest import custodian_role

REPLACEMENTS = {
    # layout, what the owner runs (format: r = the release, s = its storage, src = the source)
    "flat release replaced by a table": (
        "flat", "DROP MATERIALIZED VIEW {r}; CREATE TABLE {r} AS SELECT * FROM {src}"),
    "compact release replaced by a table": (
        "compact", "DROP VIEW {r}; CREATE TABLE {r} AS SELECT * FROM {src}"),
    "compact storage replaced by a table under a view": (
        "compact", ("DROP VIEW {r}; DROP MATERIALIZED VIEW {s}; CREATE TABLE {s} AS SELECT * FROM {src}; "
                    "CREATE VIEW {r} AS SELECT * FROM {s}")),
    "flat release emptied": ("flat", "REFRESH MATERIALIZED VIEW {r} WITH NO DATA"),
    "compact storage emptied": ("compact", "REFRESH MATERIALIZED VIEW {s} WITH NO DATA"),
}


@pytest.mark.parametrize("case", list(REPLACEMENTS))
def test_a_release_whose_relation_its_owner_replaced_is_not_verified(db, schema, connect, case):
    layout, statements = REPLACEMENTS[case]
    db.execute("CREATE TABLE pt (id int, a int, s text)")
    db.execute("INSERT INTO pt SELECT i, i % 50, (ARRAY['x', 'y', 'z'])[1 + i % 3] FROM generate_series(1, 300) i")
    with custodian_role(db, connect) as custodian:
        db.execute(sql.SQL("GRANT UPDATE ON pt TO {}").format(sql.Identifier(custodian.role)))
        with custodian() as c:
            release = c.execute(
                "SELECT anon.mondrian_view(%s, k => 5, l => 2, quasi_identifiers => ARRAY['a'], "
                "sensitive => ARRAY['s'], identifiers => ARRAY['id'], refresh_mode => 'fresh', "
                "layout => %s, release_schema => %s)::text",
                (f'"{schema}".pt', layout, f"{schema[:50]}_cust")).fetchone()[0]
            storage = release + "_classes" if layout == "compact" else release
            before = db.execute("SELECT verified, safe FROM anon.release_audit(%s)", (release,)).fetchone()
            assert before == (True, True)
            c.execute(statements.format(r=release, s=storage, src=f'"{schema}".pt'))
        audit = db.execute("SELECT verified, safe, why FROM anon.release_audit(%s)", (release,)).fetchone()
        assert audit[:2] == (False, False), audit
        assert "not verified from its released rows" in audit[2]
        status = db.execute("SELECT verified FROM anon.release_status() WHERE release = %s", (release,)).fetchone()
        assert status == (False,)
