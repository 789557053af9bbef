"""Releases and release schemas are recognised by identity, not by name (schema OID recorded
when plpy_anon creates the schema and the release; relations owned by the role that created the
release). A catalog row whose schema or relations were dropped or re-created outside plpy_anon is
stale: refreshing it fails clearly, nothing is granted or verified through it, and
anon.drop_release removes the row without touching whatever now carries its names."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import EVIL, matview, notices


@pytest.fixture
def other(db):
    role = f"idt_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db.execute(sql.SQL("GRANT CREATE ON DATABASE anon_test TO {}").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def pat(db, schema):
    db.execute("CREATE TABLE pat (id serial PRIMARY KEY, age int, zip text, dx text)")
    db.execute("INSERT INTO pat (age, zip, dx) SELECT 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
               "FROM generate_series(1, 200) g")


def mondrian(db, release_schema, name="pat_k5", source="pat"):
    return db.execute("SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => '{age,zip}', "
                      "sensitive => '{dx}', release_schema => %s, release_name => %s)",
                      (source, release_schema, name)).fetchone()[0]


def catalog_rows(db, release_schema, name="pat_k5"):
    return db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s AND release_name = %s",
                      (release_schema, name)).fetchone()[0]



def test_refresh_of_a_release_whose_schema_was_dropped_fails_clearly_and_drop_release_cleans_up(
        db, pat, release_schema):
    rel = mondrian(db, release_schema)
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(release_schema)))
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as info:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    message = info.value.diag.message_primary
    assert f'schema "{release_schema}" was dropped outside plpy_anon' in message
    assert "anon.drop_release" in message and "anon.drop_release" in info.value.diag.message_hint
    # the failure is recorded like any other
    assert "was dropped outside plpy_anon" in db.execute(
        "SELECT last_error FROM anon.releases WHERE release_schema = %s", (release_schema,)).fetchone()[0]
    # readers of a release refuse it too (they read its relations by name)
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        db.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (rel,))
    assert db.execute("SELECT anon.drop_release(%s)", (rel,)).fetchone()[0] is True
    assert catalog_rows(db, release_schema) == 0


def test_a_schema_recreated_by_another_role_is_not_used_and_its_objects_are_left_alone(
        db, connect, schema, pat, release_schema, other):
    rel = mondrian(db, release_schema)
    rid = db.execute("SELECT release_id FROM anon.releases WHERE release_schema = %s",
                     (release_schema,)).fetchone()[0]
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(release_schema)))
    s = sql.Identifier(release_schema)
    with connect(user=other) as o:
        o.execute(sql.SQL("CREATE SCHEMA {}").format(s))
        o.execute(EVIL.format(schema=s.as_string(o)))
        o.execute(sql.SQL("CREATE MATERIALIZED VIEW {s}.pat_k5 AS SELECT {s}.evil() AS age, 'x'::text AS zip, "
                          "'d'::text AS dx WITH NO DATA").format(s=s))
        o.execute(sql.SQL("CREATE TABLE {s}.{t} (x int)").format(s=s, t=sql.Identifier(f"pat_k5__refresh{rid}")))
    with connect() as dba:
        seen = notices(dba)
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                           match="was dropped and re-created outside plpy_anon"):
            dba.execute("SELECT anon.refresh(%s)", (rel,))
        results = dba.execute("SELECT status, error FROM anon.refresh_all() WHERE release = %s",
                              (rel,)).fetchall()
        assert results and results[0][0] == "failed" and "re-created outside plpy_anon" in results[0][1]
        # a new release is refused in the other role's schema
        with pytest.raises(psycopg.errors.DuplicateSchema, match="was dropped outside plpy_anon"):
            mondrian(dba, release_schema, name="second", source=f"{schema}.pat")
    assert not [m for m in seen if m.startswith("evil")], seen
    # analysts: nothing granted on the other role's schema, and grant_analyst still works
    db.execute("DROP ROLE IF EXISTS idt_analyst")
    db.execute("CREATE ROLE idt_analyst")
    try:
        db.execute("SELECT anon.grant_analyst('idt_analyst')")
        assert not db.execute("SELECT has_schema_privilege('idt_analyst', %s, 'USAGE')",
                              (release_schema,)).fetchone()[0]
        assert not db.execute("SELECT has_table_privilege('idt_analyst', %s, 'SELECT')", (rel,)).fetchone()[0]
        db.execute("SELECT anon.revoke_analyst('idt_analyst')")
    finally:
        db.execute("DROP OWNED BY idt_analyst")
        db.execute("DROP ROLE idt_analyst")
    # drop_release removes the stale row and leaves the other role's objects as they are
    assert db.execute("SELECT anon.drop_release(%s)", (rel,)).fetchone()[0] is True
    assert catalog_rows(db, release_schema) == 0
    assert db.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                      "WHERE n.nspname = %s AND c.relname LIKE 'pat_k5%%'", (release_schema,)).fetchone()[0] == 2


def test_plpy_anon_recreating_a_dropped_release_schema_works_and_old_rows_stay_stale(db, pat, release_schema):
    old = mondrian(db, release_schema, name="old")
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(release_schema)))
    before = db.execute("SELECT schema_oid::oid FROM anon.release_schemas WHERE schema_name = %s",
                        (release_schema,)).fetchone()[0]
    new = mondrian(db, release_schema, name="new")           # plpy_anon creates the schema again
    oid = db.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", (release_schema,)).fetchone()[0]
    assert db.execute("SELECT schema_oid::oid FROM anon.release_schemas WHERE schema_name = %s",
                      (release_schema,)).fetchone()[0] == oid != before
    assert db.execute("SELECT row_count FROM anon.refresh(%s)", (new,)).fetchone()[0] == 200
    db.execute(f"REFRESH MATERIALIZED VIEW {matview(db, new)}")
    # the release made in the old schema is still stale, although the schema's name is ours again
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="re-created outside plpy_anon"):
        db.execute("SELECT anon.refresh(%s)", (old,))
    # a release of the stale one's name: replace => true takes its place (the row only)
    db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age,zip}', "
               "release_schema => %s, release_name => 'old', replace => true)", (release_schema,))
    assert db.execute("SELECT row_count FROM anon.refresh(%s)", (old,)).fetchone()[0] == 200
    assert catalog_rows(db, release_schema, "old") == 1


def test_relations_replaced_by_another_role_in_a_release_schema_are_not_the_release(
        db, connect, pat, release_schema, other):
    """Inside a genuine release schema: the release's relations dropped by hand, and a role given
    CREATE on the schema (a mistake) puts its own under their names. They are not the release:
    no refresh from their query, no verification of their views as the extension's owner."""
    db.execute("SELECT anon.break_merge('pat', k => 5, l => 2, quasi_identifiers => '{age,zip}', "
               "sensitive => '{dx}', release_schema => %s)", (release_schema,))
    s = sql.Identifier(release_schema)
    db.execute(sql.SQL("DROP MATERIALIZED VIEW {s}.pat_bm CASCADE").format(s=s))
    db.execute(sql.SQL("GRANT CREATE, USAGE ON SCHEMA {} TO {}").format(s, sql.Identifier(other)))
    with connect(user=other) as o:
        seen = notices(o)
        o.execute(EVIL.format(schema=s.as_string(o)))
        o.execute(sql.SQL("CREATE MATERIALIZED VIEW {s}.pat_bm AS SELECT 1 AS x").format(s=s))
        o.execute(sql.SQL("CREATE VIEW {s}.pat_bm_qit AS SELECT 1 AS age, 'z' AS zip, {s}.evil() AS gid")
                  .format(s=s))
        o.execute(sql.SQL("CREATE VIEW {s}.pat_bm_st_dx AS SELECT 1 AS gid, 'd' AS value, 1 AS count")
                  .format(s=s))
        o.execute(sql.SQL("REFRESH MATERIALIZED VIEW {s}.pat_bm").format(s=s))   # the event trigger
    assert not [m for m in seen if m.startswith("evil")], seen
    rel = f"{release_schema}.pat_bm"
    with connect() as dba:
        seen = notices(dba)
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                           match="relations were dropped and re-created outside plpy_anon") as info:
            dba.execute("SELECT anon.refresh(%s)", (rel,))
        assert other in info.value.diag.message_detail
    assert not [m for m in seen if m.startswith("evil")], seen
    assert db.execute("SELECT anon.drop_release(%s)", (rel,)).fetchone()[0] is True
    assert db.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                      "WHERE n.nspname = %s AND c.relname LIKE 'pat_bm%%'", (release_schema,)).fetchone()[0] == 3
    db.execute(sql.SQL("REVOKE CREATE, USAGE ON SCHEMA {} FROM {}").format(s, sql.Identifier(other)))


def test_a_release_owner_changing_its_definitions_gets_no_query_run_on_its_behalf(
        db, connect, schema, pat, release_schema, other):
    """The role that created a release owns its relations and could CREATE OR REPLACE its views
    or re-create its materialized view with another query. plpy_anon records each definition as
    it built it: a changed one is never run by a refresh nor read by the verification (which the
    event trigger runs as the extension's owner); the release is reported changed instead."""
    db.execute(f"GRANT USAGE ON SCHEMA anon TO {other}; GRANT ALL ON ALL TABLES IN SCHEMA anon TO {other}; "
               f"GRANT ALL ON ALL SEQUENCES IN SCHEMA anon TO {other}; "
               f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA anon TO {other}; GRANT SELECT ON pat TO {other}"
               )
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(other)))
    try:
        with connect(user=other) as o:
            o.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            o.execute("SELECT anon.break_merge('pat', k => 5, l => 2, quasi_identifiers => '{age,zip}', "
                      "sensitive => '{dx}', release_schema => %s)", (release_schema,))
            s = sql.Identifier(release_schema)
            o.execute(sql.SQL("REFRESH MATERIALIZED VIEW {s}.pat_bm").format(s=s))    # unchanged: fine
            seen = notices(o)
            o.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(other)))
            o.execute(EVIL.format(schema=other))
            o.execute(sql.SQL("CREATE OR REPLACE VIEW {s}.pat_bm_st_dx AS SELECT _gid AS gid, _value AS value, "
                              "_count + {o}.evil() - 1 AS count FROM {s}.pat_bm WHERE _attribute = 'dx'")
                      .format(s=s, o=sql.Identifier(other)))
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="relations were changed"):
                o.execute(sql.SQL("REFRESH MATERIALIZED VIEW {s}.pat_bm").format(s=s))  # event trigger
            assert not [m for m in seen if m.startswith("evil")], seen
        with connect() as dba:
            seen = notices(dba)
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                               match="relations were changed outside plpy_anon") as info:
                dba.execute("SELECT anon.refresh(%s)", (f"{release_schema}.pat_bm",))
            assert "pat_bm_st_dx" in info.value.diag.message_detail
            assert not [m for m in seen if m.startswith("evil")], seen
    finally:
        db.execute(f"SELECT anon.drop_release('{release_schema}.pat_bm', if_exists => true)")
        db.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA anon FROM {other}; REVOKE ALL ON ALL SEQUENCES IN SCHEMA anon FROM {other}; "
                   f"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA anon FROM {other}; REVOKE USAGE ON SCHEMA anon FROM {other}; "
                   f"REVOKE SELECT ON pat FROM {other}")


def test_a_rebuilt_release_records_its_new_definitions(db, pat, release_schema):
    """anon.refresh re-creates the relations itself: their definitions become the recorded ones,
    and a later plain REFRESH (the event trigger) still finds them unchanged."""
    rel = mondrian(db, release_schema)
    before = db.execute("SELECT definitions FROM anon.releases WHERE release_schema = %s",
                        (release_schema,)).fetchone()[0]
    assert set(before) == {"pat_k5", "pat_k5_classes"}          # the view and its storage
    db.execute("SELECT anon.refresh(%s)", (rel,))
    db.execute(f"REFRESH MATERIALIZED VIEW {matview(db, rel)}")
    assert db.execute("SELECT verified FROM anon.releases WHERE release_schema = %s",
                      (release_schema,)).fetchone()[0] is True


def test_a_break_merge_release_of_another_creator_is_reported_until_its_views_change(
        db, connect, schema, pat, release_schema, other):
    """anon.risk_report refuses relations owned by roles that are neither superusers nor the
    caller (their code, an index they add at any moment, would run as the caller): the DBA does
    not report another creator's release, its creator does, and its own views are read only
    while their definitions are still the ones plpy_anon recorded."""
    db.execute(f"GRANT USAGE ON SCHEMA anon TO {other}; GRANT ALL ON ALL TABLES IN SCHEMA anon TO {other}; "
               f"GRANT ALL ON ALL SEQUENCES IN SCHEMA anon TO {other}; "
               f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA anon TO {other}; GRANT SELECT ON pat TO {other}")
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(other)))
    s = sql.Identifier(release_schema)
    try:
        with connect(user=other) as o:
            o.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            o.execute("SELECT anon.break_merge('pat', k => 5, l => 2, quasi_identifiers => '{age,zip}', "
                      "sensitive => '{dx}', release_schema => %s)", (release_schema,))
        report = "SELECT value FROM anon.risk_report(%s) WHERE measure = 'rows'"
        for relation in ("pat_bm", "pat_bm_qit"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"belongs to {other}|owned by {other}"):
                db.execute("SELECT * FROM anon.risk_report(%s, quasi_identifiers => '{age,zip}')",
                           (f"{release_schema}.{relation}",))
        with connect(user=other) as o:
            o.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            assert float(o.execute(report, (f"{release_schema}.pat_bm",)).fetchone()[0]) == 200
            o.execute(sql.SQL("CREATE OR REPLACE VIEW {s}.pat_bm_qit AS SELECT age, zip, m._gid AS gid "
                              "FROM {s}.pat_bm AS m CROSS JOIN LATERAL pg_catalog.generate_series(1, m._count) "
                              "WHERE m._attribute IS NULL AND m._gid >= 0").format(s=s))
            # refused: its recorded definitions differ (55000) or, checked first on some paths,
            # the view is not the query plpy_anon writes for it (42501)
            with pytest.raises((psycopg.errors.ObjectNotInPrerequisiteState, psycopg.errors.InsufficientPrivilege),
                               match="relations were changed|not the queries plpy_anon wrote"):
                o.execute(report, (f"{release_schema}.pat_bm",))
    finally:
        db.execute(f"SELECT anon.drop_release('{release_schema}.pat_bm', if_exists => true)")
        db.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA anon FROM {other}; "
                   f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA anon FROM {other}; "
                   f"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA anon FROM {other}; REVOKE USAGE ON SCHEMA anon FROM {other}")
