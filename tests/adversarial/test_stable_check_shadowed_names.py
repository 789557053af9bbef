"""Adversarial: the owner of a stable release's source table defines, in its own schema (first on
the search_path of whoever refreshes), operators and functions named like those the stable
check's statements call: the date QIs' day numbers (``date - date``, ``date > date``,
``isfinite``, ``lower``/``upper`` of a daterange), integer bounds (``int8 + int4``), and the
joined reads (``array_to_string``, ``string_agg``, ``cardinality``, ``convert_to``), each
running the owner's payload. A creation, ``anon.refresh`` and a plain REFRESH MATERIALIZED VIEW
(by a superuser or a custodian) must call none of them."""
from __future__ import annotations

from psycopg import sql

from tests.helpers import PAYLOAD_FUNCTION, matview, notices, release_schema_of
from tests.helpers import assert_payload_not_run as assert_not_run

SHADOWS = PAYLOAD_FUNCTION + """
CREATE FUNCTION {s}.date_minus(date, date) RETURNS integer LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN $1 OPERATOR(pg_catalog.-) $2; END $f$;
CREATE OPERATOR {s}.- (LEFTARG = date, RIGHTARG = date, FUNCTION = {s}.date_minus);
CREATE FUNCTION {s}.date_after(date, date) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN $1 OPERATOR(pg_catalog.>) $2; END $f$;
CREATE OPERATOR {s}.> (LEFTARG = date, RIGHTARG = date, FUNCTION = {s}.date_after);
CREATE FUNCTION {s}.int8_plus(int8, int4) RETURNS int8 LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN $1 OPERATOR(pg_catalog.+) $2; END $f$;
CREATE OPERATOR {s}.+ (LEFTARG = int8, RIGHTARG = int4, FUNCTION = {s}.int8_plus);
CREATE FUNCTION {s}.isfinite(date) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN pg_catalog.isfinite($1); END $f$;
CREATE FUNCTION {s}.lower(daterange) RETURNS date LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN pg_catalog.lower($1); END $f$;
CREATE FUNCTION {s}.upper(daterange) RETURNS date LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN pg_catalog.upper($1); END $f$;
CREATE FUNCTION {s}.cardinality(anyarray) RETURNS integer LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN pg_catalog.cardinality($1); END $f$;
CREATE FUNCTION {s}.array_to_string(anyarray, text, text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN pg_catalog.array_to_string($1, $2, $3); END $f$;
CREATE FUNCTION {s}.convert_to(text, name) RETURNS bytea LANGUAGE plpgsql AS $f$
BEGIN PERFORM {s}.payload(); RETURN pg_catalog.convert_to($1, $2); END $f$;
CREATE TABLE {s}.pt (id int PRIMARY KEY, born date, zip int, dx text);
INSERT INTO {s}.pt SELECT g, DATE '1990-01-01' + (g * 37) % 700, (g * 11) % 90,
       (ARRAY['flu','hiv','cold','ok'])[1 + (g * 7) % 4] FROM generate_series(1, 300) g;
"""


def test_names_shadowed_in_the_owners_schema_are_never_called_by_the_stable_check(db, connect, as_dba,
                                                                                  owner_for, schema):
    with owner_for(f"{schema}_own") as (role, own):
        with connect(user=role) as owner:
            quoted = own.as_string(owner)
            owner.execute(SHADOWS.format(s=quoted, owner=sql.Literal(role).as_string(owner)))
        with as_dba() as victim:
            victim.execute(sql.SQL("SET search_path = {}, public").format(own))
            seen = notices(victim)
            release = victim.execute(
                f"SELECT anon.mondrian_view('{quoted}.pt', k => 4, l => 2, quasi_identifiers => "
                "'{born,zip}', sensitive => '{dx}', identifiers => '{id}', refresh_mode => 'stable', "
                "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
            for step in range(2):
                db.execute(sql.SQL("DELETE FROM {}.pt WHERE id %% 17 = %s").format(own), (step,))
                db.execute(sql.SQL("INSERT INTO {}.pt SELECT g, DATE '1990-03-01' + g %% 500, g %% 90, 'ok' "
                                   "FROM generate_series(%s::int, %s::int) g").format(own),
                           (1000 + 10 * step, 1005 + 10 * step))
                victim.execute("SELECT anon.refresh(%s)", (release,))
            victim.execute(f"REFRESH MATERIALIZED VIEW {matview(victim, release)}")
            history = db.execute("SELECT count(*) FROM anon.release_versions v JOIN anon.releases r "
                                 "USING (release_id) WHERE format('%%I.%%I', r.release_schema, "
                                 "r.release_name) = %s", (release,)).fetchone()[0]
            victim.execute("SELECT anon.drop_release(%s)", (release,))
        assert history >= 3
        assert_not_run(db, role, seen)
        with connect(user=role) as owner:       # the shadows do run where the path finds them
            owner.execute(sql.SQL("SET search_path = {}, pg_catalog").format(own))
            shown = notices(owner)
            owner.execute("SELECT DATE '2020-01-02' - DATE '2020-01-01', isfinite(DATE '2020-01-01')")
        assert len([m for m in shown if m.startswith("evil")]) == 2
