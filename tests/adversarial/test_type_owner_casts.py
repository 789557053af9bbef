"""Adversarial: the owner of a source table's column TYPE runs code as whoever builds a release.

A role that owns a type may define casts from it (CREATE CAST needs ownership of one of the two
types), with a function of its own. SQL that converts a column of that type with ``::text`` (or
``::int8``, ``::float8`` for a type merely NAMED like a number: an enum called "int4") runs the
function with the rights of the role running the query: the DBA building the release, a refresh,
a pg_cron job, all typically superuser. Found by an independent review: the table owner made
itself superuser through ``anon.mondrian_view``, ``anon.refresh``, ``REFRESH MATERIALIZED VIEW``
and ``anon.detect_identifiers``.

plpy_anon reads such values through the type's output function instead (``sqltext.text_of``):
no cast the owner made is ever called. Each test FAILS while the hole is open.
"""
from __future__ import annotations

import pytest
from psycopg import sql

from tests.helpers import PAYLOAD_FUNCTION, matview, notices
from tests.helpers import assert_payload_not_run as assert_not_run

# Every cast function raises a NOTICE naming who runs it and, run by a superuser, makes its owner
# one: either is a failure. It returns the value's label, so a release built through it would
# still look plausible.
CASTS = PAYLOAD_FUNCTION + """
CREATE TYPE {s}.sexe AS ENUM ('F', 'M');
CREATE TYPE {s}."int4" AS ENUM ('g1', 'g2', 'g3');
CREATE TYPE {s}.note AS (j json);
CREATE FUNCTION {s}.sexe_text({s}.sexe) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN pg_catalog.format('%s', $1); END $f$;
CREATE CAST ({s}.sexe AS text) WITH FUNCTION {s}.sexe_text({s}.sexe);
CREATE FUNCTION {s}.grade_text({s}."int4") RETURNS text LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN pg_catalog.format('%s', $1); END $f$;
CREATE CAST ({s}."int4" AS text) WITH FUNCTION {s}.grade_text({s}."int4");
CREATE FUNCTION {s}.grade_int8({s}."int4") RETURNS int8 LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN 1; END $f$;
CREATE CAST ({s}."int4" AS int8) WITH FUNCTION {s}.grade_int8({s}."int4");
CREATE FUNCTION {s}.grade_float8({s}."int4") RETURNS float8 LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN 1; END $f$;
CREATE CAST ({s}."int4" AS float8) WITH FUNCTION {s}.grade_float8({s}."int4");
CREATE FUNCTION {s}.note_text({s}.note) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN pg_catalog.format('%s', $1); END $f$;
CREATE CAST ({s}.note AS text) WITH FUNCTION {s}.note_text({s}.note);
CREATE TABLE {s}.t (id serial PRIMARY KEY, age int, sex {s}.sexe, grade {s}."int4", dx text,
                    note {s}.note);
INSERT INTO {s}.t (age, sex, grade, dx, note)
SELECT 20 + g % 40, (CASE WHEN g % 2 = 0 THEN 'F' ELSE 'M' END)::{s}.sexe,
       (ARRAY['g1', 'g2', 'g3'])[1 + g % 3]::{s}."int4", 'd' || g % 4,
       CASE WHEN g % 7 = 0 THEN NULL ELSE ROW(pg_catalog.json_build_object('n', g % 3))::{s}.note END
FROM generate_series(1, 240) g;
"""


@pytest.fixture
def owner_schema(db, connect, schema, owner_for):
    """A plain login role owning a schema, a table in it and the types of its columns, each type
    with casts whose function is the role's own. Yields (role, quoted schema)."""
    with owner_for(f"{schema}_own") as (role, own):
        with connect(user=role) as a:
            quoted = own.as_string(a)
            a.execute(CASTS.format(s=quoted, owner=sql.Literal(role).as_string(a)))
        yield role, quoted


def test_releases_and_refreshes_never_call_the_type_owners_casts(as_dba, db, connect, owner_schema,
                                                                 release_schema):
    role, s = owner_schema
    with as_dba() as dba:                                   # the DBA (superuser), or pg_cron
        seen = notices(dba)
        db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
        name = dba.execute(
            f"SELECT anon.mondrian_view('{s}.t', k => 5, quasi_identifiers => '{{age,sex,grade}}', "
            "sensitive => '{dx}', release_schema => %s)", (release_schema,)).fetchone()[0]
        # the enum named "int4" is a value set, not a number; the labels are the types' own
        labels = dba.execute(f"SELECT array_agg(DISTINCT v ORDER BY v) FROM {name}, "
                             "unnest(sex || grade) AS v").fetchone()[0]
        assert labels == ["F", "M", "g1", "g2", "g3"]
        assert dba.execute(f"SELECT pg_typeof(grade)::text FROM {name} LIMIT 1").fetchone()[0] == "text[]"
        dba.execute("SELECT anon.refresh(%s)", (name,))
        dba.execute(f"REFRESH MATERIALIZED VIEW {matview(dba, name)}")
        by_sex = dba.execute(f"SELECT anon.mondrian_view('{s}.t', k => 5, l => 2, "
                             "quasi_identifiers => '{age,grade}', sensitive => '{sex}', "
                             "release_name => 'by_sex', release_schema => %s)",
                             (release_schema,)).fetchone()[0]
        # the release keeps the sensitive column's type: its rules read its values as text
        dba.execute("SELECT * FROM anon.detect_dependencies(%s, risk => 0.5)", (by_sex,)).fetchall()
    assert_not_run(db, role, seen)


def test_detection_reports_and_hierarchies_never_call_the_type_owners_casts(as_dba, db, connect, owner_schema,
                                                                            release_schema):
    role, s = owner_schema
    with as_dba() as dba:
        seen = notices(dba)
        found = dba.execute(f"SELECT column_name FROM anon.detect_identifiers('{s}.t')").fetchall()
        assert found is not None
        db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
        # a hierarchy is checked against the values present (their text)
        db.execute(f"SELECT anon.set_hierarchy('{s}.t', 'sex', "
                    "ARRAY[ARRAY['F', 'any'], ARRAY['M', 'any']])")
        rows = dba.execute(f"SELECT measure, value FROM anon.risk_report('{s}.t', "
                           "quasi_identifiers => '{sex,grade}', sensitive => '{dx}')").fetchall()
        assert rows
        # note (a composite holding json) has no ordering: the release's check counts its
        # values by their text
        dba.execute(f"SELECT anon.mondrian_view('{s}.t', k => 5, l => 2, "
                    "quasi_identifiers => '{age,sex}', sensitive => '{note}', "
                    "release_name => 'by_note', release_schema => %s)", (release_schema,))
        bm = dba.execute(f"SELECT anon.break_merge('{s}.t', k => 5, l => 2, "
                         "quasi_identifiers => '{age,grade}', sensitive => '{sex}', "
                         "release_schema => %s)", (release_schema,)).fetchone()[0]
        dba.execute("SELECT * FROM anon.detect_dependencies(%s, risk => 0.5)", (bm,)).fetchall()
    assert_not_run(db, role, seen)


def test_a_cast_added_after_the_release_is_not_called_by_its_refresh(as_dba, owner_for, db, connect, schema,
                                                                     release_schema):
    """The stored release query and every refresh read values through the output function: a
    cast created later (the review's second scenario) is not picked up either."""
    with owner_for(f"{schema}_late") as (role, own):
        with connect(user=role) as a:
            s = own.as_string(a)
            a.execute(f"CREATE TYPE {s}.sexe AS ENUM ('F', 'M'); "
                      f"CREATE TABLE {s}.t (id serial PRIMARY KEY, age int, sex {s}.sexe, dx text); "
                      f"INSERT INTO {s}.t (age, sex, dx) SELECT 20 + g % 40, "
                      f"(CASE WHEN g % 2 = 0 THEN 'F' ELSE 'M' END)::{s}.sexe, 'd' || g % 4 "
                      "FROM generate_series(1, 200) g")
        with as_dba() as dba:
            seen = notices(dba)
            db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
            name = dba.execute(f"SELECT anon.mondrian_view('{s}.t', k => 5, "
                               "quasi_identifiers => '{age,sex}', sensitive => '{dx}', "
                               "release_schema => %s)", (release_schema,)).fetchone()[0]
            with connect(user=role) as a:
                a.execute(PAYLOAD_FUNCTION.format(s=s, owner=sql.Literal(role).as_string(a)))
                a.execute(f"CREATE FUNCTION {s}.sexe_text({s}.sexe) RETURNS text LANGUAGE plpgsql "
                          f"AS $f$ BEGIN PERFORM {s}.payload(); RETURN pg_catalog.format('%s', $1); "
                          f"END $f$; CREATE CAST ({s}.sexe AS text) WITH FUNCTION {s}.sexe_text({s}.sexe)")
            dba.execute("SELECT anon.refresh(%s)", (name,))
            dba.execute(f"REFRESH MATERIALIZED VIEW {matview(dba, name)}")
            dba.execute("SELECT anon.refresh_all()")
        assert_not_run(db, role, seen)
