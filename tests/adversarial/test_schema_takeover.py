"""Adversarial (h8): release schemas and releases are identified by NAME only.

anon.release_schemas records schema names, anon.releases (schema, name) pairs. When a release
schema is dropped outside plpy_anon (DROP SCHEMA ... CASCADE), its rows stay. Any role with
CREATE on the database then re-creates a schema of that name: plpy_anon accepts it as its own
(new releases go into a schema the attacker owns), and every stale release row points at
relations the attacker creates. anon.refresh (run by the DBA or pg_cron) re-executes the
attacker's pg_get_viewdef() as superuser, and the SECURITY DEFINER event trigger runs the
verification queries over attacker views as the extension owner when the attacker refreshes
its own materialized view: code execution as superuser (COPY ... TO PROGRAM => postgres OS user).

Each test FAILS while the hole is open.
"""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import EVIL, notices


@pytest.fixture
def attacker(db, connect):
    """A plain login role with CREATE on the database (e.g. the application's owner role)."""
    role = f"adv_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db.execute(sql.SQL("GRANT CREATE ON DATABASE anon_test TO {}").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))



def source_table(db, schema):
    db.execute("CREATE TABLE pat (id serial PRIMARY KEY, age int, zip text, dx text)")
    db.execute("INSERT INTO pat (age, zip, dx) SELECT 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
               "FROM generate_series(1, 200) g")


def test_recreated_release_schema_is_not_accepted_as_plpy_anons(db, connect, schema, release_schema,
                                                                 attacker):
    source_table(db, schema)
    db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age,zip}', "
               "sensitive => '{dx}', release_schema => %s)", (release_schema,))
    db.execute("SELECT anon.drop_release(%s)", (f"{release_schema}.pat_k5",))
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(release_schema)))  # DBA cleanup
    with connect(user=attacker) as a:
        a.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(release_schema)))
    # the DBA's next release in that schema must not land in a schema the attacker owns: refused
    with pytest.raises(psycopg.errors.DuplicateSchema, match="was not created by plpy_anon") as error:
        db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age,zip}', "
                   "sensitive => '{dx}', release_schema => %s)", (release_schema,))
    assert release_schema in error.value.diag.message_primary, error.value.diag.message_primary
    assert db.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                      "WHERE n.nspname = %s", (release_schema,)).fetchone()[0] == 0


def test_refresh_of_stale_release_does_not_run_attacker_code_as_superuser(as_dba, db, connect, schema,
                                                                          release_schema, attacker):
    source_table(db, schema)
    db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age,zip}', "
               "sensitive => '{dx}', release_schema => %s)", (release_schema,))
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(release_schema)))  # DBA cleanup
    with connect(user=attacker) as a:
        a.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(release_schema)))
        a.execute(EVIL.format(schema=sql.Identifier(release_schema).as_string(a)))
        a.execute(sql.SQL("CREATE MATERIALIZED VIEW {}.pat_k5 AS SELECT {}.evil() AS age, "
                          "'x'::text AS zip, 'd'::text AS dx WITH NO DATA").format(
            sql.Identifier(release_schema), sql.Identifier(release_schema)))
    with as_dba() as dba:                                # the DBA, or the pg_cron job
        seen = notices(dba)
        try:
            dba.execute("SELECT anon.refresh(%s)", (f"{release_schema}.pat_k5",))
        except psycopg.Error:
            pass
    assert not [m for m in seen if m.startswith("evil") and m.endswith("super=t")], seen


def test_event_trigger_does_not_run_attacker_code_as_superuser(db, connect, schema, release_schema,
                                                               attacker):
    source_table(db, schema)
    db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(release_schema)))
    db.execute(sql.SQL("DROP SCHEMA {}").format(sql.Identifier(release_schema)))
    # stale name in anon.release_schemas: a first release, then the schema dropped by hand
    db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age,zip}', "
               "release_schema => %s, release_name => 'first')", (release_schema,))
    db.execute("SELECT anon.drop_release(%s)", (f"{release_schema}.first",))
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(release_schema)))
    with connect(user=attacker) as a:
        a.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(release_schema)))
    # the DBA's release would go into the attacker's schema: refused (first test), so there is
    # nothing of the DBA's there for the attacker to swap
    with pytest.raises(psycopg.errors.DuplicateSchema, match="was not created by plpy_anon"):
        db.execute("SELECT anon.break_merge('pat', k => 5, l => 2, quasi_identifiers => '{age,zip}', "
                   "sensitive => '{dx}', release_schema => %s)", (release_schema,))
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema,)).fetchone()[0] == 0


def test_event_trigger_ignores_a_stale_release_in_a_recreated_schema(db, connect, schema, release_schema,
                                                                    attacker):
    """No DBA involved after the cleanup: a Break-Merge release's schema is dropped by hand (its
    catalog row stays), the attacker re-creates the schema with its own matview and ``_qit`` view
    under the release's names and refreshes its own matview: the SECURITY DEFINER event trigger
    must not take it for the release (verification would read ``_qit`` as the extension owner)."""
    source_table(db, schema)
    db.execute("SELECT anon.break_merge('pat', k => 5, l => 2, quasi_identifiers => '{age,zip}', "
               "sensitive => '{dx}', release_schema => %s)", (release_schema,))
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(release_schema)))  # DBA cleanup
    s = sql.Identifier(release_schema)
    with connect(user=attacker) as a:
        seen = notices(a)
        a.execute(sql.SQL("CREATE SCHEMA {}").format(s))
        a.execute(EVIL.format(schema=s.as_string(a)))
        a.execute(sql.SQL("CREATE MATERIALIZED VIEW {s}.pat_bm AS SELECT 1 AS x").format(s=s))
        a.execute(sql.SQL("CREATE VIEW {s}.pat_bm_qit AS SELECT 1 AS age, 'z' AS zip, {s}.evil() AS gid")
                  .format(s=s))
        a.execute(sql.SQL("CREATE VIEW {s}.pat_bm_st_dx AS SELECT 1 AS gid, 'd' AS value, 1 AS count")
                  .format(s=s))
        a.execute(sql.SQL("REFRESH MATERIALIZED VIEW {s}.pat_bm").format(s=s))
    assert not [m for m in seen if m.startswith("evil") and m.endswith("super=t")], seen
