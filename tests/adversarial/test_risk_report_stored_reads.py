"""Attacks on anon.risk_report of a compact release read from its stored classes
(risk_report.resolve -> stored_classes, class_counts.read_stored): an analyst must learn nothing
through the report that they could not SELECT, and every figure must be the one the release's
view shows, grouped (a plain view over the release: anon.risk_report groups its rows), whoever
reads it and whatever its owner did to the storage below the view plpy_anon wrote.

The owner (here the superuser who made the release; a custodian owns its storage the same way)
may rebuild the storage under its name with any contents and put the view plpy_anon wrote back
over it: the report then still reads the stored classes (the view is the one plpy_anon writes,
over a materialized view), so they must be counted exactly as the view unfolds them (arrays of
unequal lengths padded with NULLs, NULL and empty arrays, classes of no rows)."""
from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
from psycopg import sql

from tests.db.test_risk_report import load, report
from tests.db.test_risk_report_stored import (
    QIS,
    READS_STORED,
    assert_same_report,
    reads_stored,
)
from tests.helpers import (
    PAYLOAD_FUNCTION,
    assert_payload_not_run,
    create_release,
    notices,
    release_schema_of,
)
from tests.waits import HANG, wait_until

ANALYST = "risk_attacker"


@pytest.fixture
def people(db, schema):
    load(db)
    db.execute("UPDATE people SET diagnosis = NULL WHERE id % 17 = 0")
    db.execute("ANALYZE people")
    return "people"


def compact(db, schema, table="people", name="r", **models):
    return create_release(db, "mondrian_view", schema, table, k=5, quasi_identifiers=QIS,
                          sensitive=["diagnosis", "salary"], identifiers=["id"],
                          layout="compact", release_name=name, **models)


def rebuild_storage(db, schema, name: str, select: str) -> None:
    """As the release's owner: the storage ``<name>_classes`` rebuilt as the materialized view
    ``select`` (``s``: the genuine storage's rows), and the view plpy_anon wrote put back over
    it, its text unchanged."""
    rs = sql.Identifier(release_schema_of(schema))
    storage, old = sql.Identifier(f"{name}_classes"), sql.Identifier(f"{name}_genuine")
    definition = db.execute("SELECT pg_get_viewdef(%s::regclass)",
                            (f'"{release_schema_of(schema)}".{name}',)).fetchone()[0]
    db.execute(sql.SQL("ALTER MATERIALIZED VIEW {}.{} RENAME TO {}").format(rs, storage, old))
    db.execute(sql.SQL("CREATE MATERIALIZED VIEW {}.{} AS {}").format(
        rs, storage, sql.SQL(select.format(storage=f"{rs.as_string(db)}.{old.as_string(db)}"))))
    db.execute(sql.SQL("CREATE OR REPLACE VIEW {}.{} AS {}").format(
        rs, sql.Identifier(name),
        sql.SQL(definition.rstrip().rstrip(";").replace(f"{name}_genuine", f"{name}_classes"))))


@pytest.mark.parametrize("tamper", [
    # arrays of unequal lengths: the view pads the shorter with NULLs
    "SELECT age, sex, zip, diagnosis[1:1] AS diagnosis, salary FROM {storage} s",
    "SELECT age, sex, zip, diagnosis, salary[2:] AS salary FROM {storage} s",
    # a NULL array, an empty one, beside a full one; a class of none at all (no rows)
    ("SELECT age, sex, zip, CASE WHEN salary[1] % 2 = 0 THEN NULL ELSE diagnosis END AS "
     "diagnosis, CASE WHEN salary[1] % 3 = 0 THEN '{{}}'::int[] ELSE salary END AS salary "
     "FROM {storage} s"),
    ("SELECT age, sex, zip, CASE WHEN salary[1] % 2 = 0 THEN NULL ELSE diagnosis END AS "
     "diagnosis, CASE WHEN salary[1] % 2 = 0 THEN NULL ELSE salary END AS salary FROM {storage} s"),
    # extra NULL elements, and two classes with the same QIs (an analyst sees one)
    ("SELECT age, sex, zip, diagnosis || ARRAY[NULL, NULL]::text[] AS diagnosis, salary "
     "FROM {storage} s UNION ALL SELECT age, sex, zip, diagnosis, salary FROM {storage} s "
     "WHERE salary[1] % 5 = 0"),
    # arrays whose subscripts start at 5
    ("SELECT age, sex, zip, ('[5:' || (4 + cardinality(diagnosis)) || ']={{' || "
     "array_to_string(diagnosis, ',', 'NULL') || '}}')::text[] AS diagnosis, salary "
     "FROM {storage} s WHERE array_position(diagnosis, NULL) IS NULL"),
], ids=["truncated", "shifted", "null-and-empty", "null-class", "extra-nulls-and-merge",
        "lower-bounds"])
def test_a_storage_rebuilt_by_its_owner_reports_what_the_view_shows(db, schema, people, tamper):
    release = compact(db, schema)
    rebuild_storage(db, schema, "r", tamper)
    for qis, sensitive in ((None, None), (QIS, ["salary"]), (QIS, ["diagnosis"])):
        for budget in (None, "16kB"):
            assert_same_report(db, release, qis, sensitive, budget, population=5000)
    assert reads_stored(db, release), "the rebuilt storage was not read: no attack"


def test_a_two_dimensional_array_in_the_storage_reports_what_the_view_shows(db, schema, people):
    release = compact(db, schema)
    rebuild_storage(db, schema, "r", "SELECT age, sex, zip, ARRAY[diagnosis, diagnosis] AS "
                                     "diagnosis, salary FROM {storage} s")
    with contextlib.suppress(psycopg.errors.FeatureNotSupported):
        # array_position refuses a multidimensional array: an error, no figures, is fine
        assert_same_report(db, release, None, None)


def test_hostile_values_report_what_the_view_shows(db, schema):
    """NULL QIs; text with 0x01 and 0x02 (0x01 is the stored read's delimiter); floats NaN,
    +-Infinity, -0 and 0; 20-digit numerics and equal numerics written apart (1.0, 1.00)."""
    db.execute("CREATE TABLE hostile (id int, age int, sex text, zip text, diagnosis text, "
               "salary float8, amount numeric, note text)")
    db.execute(r"""
        INSERT INTO hostile
        SELECT i, 20 + i % 7, CASE WHEN i % 11 = 0 THEN NULL ELSE (ARRAY['F', 'M'])[1 + i % 2] END,
               CASE WHEN i % 13 = 0 THEN NULL ELSE (53700 + i % 5)::text END,
               (ARRAY[E'a\x01b', E'a\x02b', E'\x01', E'\x02\x02', '', NULL, 'plain',
                      E'a\x01', E'\x01b'])[1 + i % 9],
               (ARRAY['NaN', 'Infinity', '-Infinity', '-0', '0', '1e308', '-1e308',
                      '5e-324'])[1 + i % 8]::float8,
               (ARRAY['12345678901234567890', '-12345678901234567890', '1.0', '1.00', '1',
                      '0.00000000000000000001', 'NaN', NULL])[1 + i % 8]::numeric,
               (ARRAY[E'\x02', 'x', '', NULL, E'a\x02b', 'é'])[1 + i % 6]
        FROM generate_series(1, 400) i""")
    release = create_release(db, "mondrian_view", schema, "hostile", k=5,
                             quasi_identifiers=QIS, sensitive=["diagnosis", "salary", "amount"],
                             identifiers=["id"], layout="compact", release_name="h")
    for budget in (None, "16kB"):
        assert_same_report(db, release, None, None, budget, population=5000,
                           released=("diagnosis", "salary", "amount"))
        assert_same_report(db, release, QIS, ["salary", "amount"], budget)
    assert reads_stored(db, release, QIS, ["salary", "amount"])
    # the float and the numeric as QIs (their released ranges grouped), texts without 0x01
    # sensitive: read from the stored texts
    qis = ["sex", "salary", "amount"]
    release = create_release(db, "mondrian_view", schema, "hostile", k=5, quasi_identifiers=qis,
                             sensitive=["note"], identifiers=["id"], layout="compact",
                             release_name="h_numbers")
    for budget in (None, "16kB"):
        assert_same_report(db, release, qis, ["note"], budget, released=("note",))
    assert reads_stored(db, release, qis, ["note"])


@contextlib.contextmanager
def analyst(db, release: str, *storage_columns: str):
    """A login role that may run the report, read the catalog and select ``release`` (and these
    columns of its storage: "*" for the whole)."""
    rs = release.split(".")[0]
    db.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(ANALYST)))
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(ANALYST)))
    try:
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA anon TO {}").format(sql.Identifier(ANALYST)))
        db.execute(sql.SQL("GRANT EXECUTE ON FUNCTION anon.risk_report(regclass, text[], text[], "
                           "bigint, double precision, double precision) TO {}").format(
            sql.Identifier(ANALYST)))
        db.execute(sql.SQL("GRANT SELECT ON anon.releases, anon.column_roles TO {}").format(
            sql.Identifier(ANALYST)))
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.SQL(rs),
                                                                    sql.Identifier(ANALYST)))
        db.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.SQL(release),
                                                              sql.Identifier(ANALYST)))
        if storage_columns == ("*",):
            db.execute(sql.SQL("GRANT SELECT ON {}_classes TO {}").format(
                sql.SQL(release), sql.Identifier(ANALYST)))
        elif storage_columns:
            db.execute(sql.SQL("GRANT SELECT ({}) ON {}_classes TO {}").format(
                sql.SQL(", ").join(map(sql.Identifier, storage_columns)), sql.SQL(release),
                sql.Identifier(ANALYST)))
        yield ANALYST
    finally:
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(ANALYST)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(ANALYST)))


def test_row_security_cannot_be_put_on_the_storage(db, schema, people):
    """Row security would show the analyst other stored rows than the view's owner sees: a
    materialized view cannot have it, and anything else under the storage's name is grouped
    through the view (tests/db/test_risk_report_stored.py: a table)."""
    release = compact(db, schema)
    with pytest.raises(psycopg.errors.WrongObjectType):
        db.execute(sql.SQL("ALTER TABLE {}_classes ENABLE ROW LEVEL SECURITY").format(
            sql.SQL(release)))


def test_a_view_under_the_storages_name_that_shows_each_caller_other_rows_is_grouped(
        db, schema, people, connect):
    """A view of the owner's over the genuine storage, filtered by current_user, put under the
    storage's name below the view plpy_anon wrote (its text unchanged): the release's view shows
    the analyst no row, the genuine storage (which the analyst may select) every one. Not a
    materialized view: the view's rows are grouped, the report is of what the analyst sees."""
    release = compact(db, schema)
    owners = report(db, release)
    rs = sql.Identifier(release_schema_of(schema))
    definition = db.execute("SELECT pg_get_viewdef(%s::regclass)", (release,)).fetchone()[0]
    db.execute(sql.SQL("ALTER MATERIALIZED VIEW {}.r_classes RENAME TO r_genuine").format(rs))
    db.execute(sql.SQL("CREATE VIEW {}.r_classes AS SELECT * FROM {}.r_genuine "
                       "WHERE current_user <> {}").format(rs, rs, sql.Literal(ANALYST)))
    db.execute(sql.SQL("CREATE OR REPLACE VIEW {}.r AS {}").format(
        rs, sql.SQL(definition.rstrip().rstrip(";").replace("r_genuine", "r_classes"))))
    with analyst(db, release, "*") as role:
        db.execute(sql.SQL("GRANT SELECT ON {}.r_genuine TO {}").format(rs, sql.Identifier(role)))
        assert not reads_stored(db, release, role=role)
        with connect(user=role) as conn:
            seen = report(conn, release)
            assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                sql.SQL(release))).fetchone()[0] == 0
        assert seen[("rows", None)][0] == seen[("classes", None)][0] == 0
        assert owners[("rows", None)][0] == 400
        assert report(db, release) == owners


def test_a_storage_column_the_analyst_may_not_select_is_not_read(db, schema, people, connect):
    """Every array is read for a class's rows: one column of the storage withheld (salary's,
    the report asked only for diagnosis), the view is grouped, to the same figures."""
    release = compact(db, schema)
    owners = report(db, release, quasi_identifiers=QIS, sensitive=["diagnosis"])
    with analyst(db, release, "ctid", *QIS, "diagnosis") as role:
        assert not reads_stored(db, release, QIS, ["diagnosis"], role=role)
        with connect(user=role) as conn:
            assert report(conn, release, quasi_identifiers=QIS, sensitive=["diagnosis"]) == owners
        db.execute(sql.SQL("GRANT SELECT (salary) ON {}_classes TO {}").format(
            sql.SQL(release), sql.Identifier(role)))
        assert reads_stored(db, release, QIS, ["diagnosis"], role=role)
        with connect(user=role) as conn:
            assert report(conn, release, quasi_identifiers=QIS, sensitive=["diagnosis"]) == owners


def test_an_analysts_temporary_objects_named_like_plpy_anons_change_nothing(db, schema, people,
                                                                           connect):
    """pg_temp comes first in every search_path: a temporary table named like the storage, and
    the temporary view the check makes, made beforehand by the analyst. The report is the
    owner's, read from the genuine storage (or grouped), never from the analyst's table."""
    release = compact(db, schema)
    owners = report(db, release)
    with analyst(db, release, "*") as role:
        db.execute(sql.SQL("GRANT TEMPORARY ON DATABASE {} TO {}").format(
            sql.Identifier(db.info.dbname), sql.Identifier(role)))
        try:
            with connect(user=role) as conn:
                conn.execute("CREATE TEMPORARY TABLE r_classes AS SELECT 1 AS age, 'F' AS sex, "
                             "'x' AS zip, ARRAY['flu'] AS diagnosis, ARRAY[1] AS salary")
                conn.execute("SET search_path = pg_temp, public")
                assert report(conn, release) == owners
                conn.execute("CREATE TEMPORARY VIEW plpy_anon_expected_view AS SELECT 1 AS x")
                assert report(conn, release) == owners
        finally:
            db.execute(sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM {}").format(
                sql.Identifier(db.info.dbname), sql.Identifier(role)))


PAUSE_BETWEEN_CHUNKS = """
CREATE OR REPLACE FUNCTION pg_temp.pause_between_chunks(key bigint) RETURNS void AS $fn$
# one block per chunk; after the first chunk, wait for the advisory lock the test holds
from plpy_anon.db import class_counts
class_counts.STORED_CHUNK_BLOCKS = 1
fetches = class_counts._stored_fetches
if not getattr(fetches, "paused", False):
    def paused(plpy, *args, **kwargs):
        for i, chunk in enumerate(fetches(plpy, *args, **kwargs)):
            yield chunk
            if i == 0:
                plpy.execute(f"SELECT pg_catalog.pg_advisory_lock({GD['pause_key']})")
                plpy.execute(f"SELECT pg_catalog.pg_advisory_unlock({GD['pause_key']})")
    paused.paused = True
    class_counts._stored_fetches = paused
GD["pause_key"] = key
$fn$ LANGUAGE plpython3u"""


@pytest.mark.parametrize("how, budget", [("plpy_anon", None), ("concurrently", None),
                                         ("concurrently", "16kB")])
def test_a_refresh_between_two_chunks_of_the_stored_read_is_not_mixed_in(db, schema, people,
                                                                       connect, how, budget):
    """The stored classes are read a range of blocks at a time, each a query of its own. The
    storage refreshed between two of them (plpy_anon's refresh; the owner's REFRESH ...
    CONCURRENTLY, for which it indexed its storage) must not give figures of half of each
    version: the report is that of one version, as the grouped view's single query is (16kB:
    the bounded read, two passes over the chunks)."""
    db.execute("CREATE TABLE many (id int, age int, sex text, zip text, diagnosis text, "
               "salary int)")
    db.execute("INSERT INTO many SELECT i, 20 + i % 60, (ARRAY['F', 'M'])[1 + i % 2], "
               "(53700 + i % 97)::text, (ARRAY['flu', 'gout', 'cold'])[1 + i % 3], i % 1000 "
               "FROM generate_series(1, 20000) i")
    release = compact(db, schema, "many")
    rs = sql.Identifier(release_schema_of(schema))
    before = report(db, release)
    if budget:       # the same figures (tests/db/test_risk_report_stored.py): compared as one
        assert_same_report(db, release, None, None, budget)
    blocks = db.execute("SELECT pg_relation_size(%s) / 8192", (f"{release}_classes",)).fetchone()[0]
    assert blocks >= 2, "one chunk only: nothing to interleave"
    key = 7_000_021
    holder = connect()
    holder.execute("SELECT pg_advisory_lock(%s)", (key,))
    result: dict = {}

    def run_report():
        with connect() as conn:
            conn.execute("SELECT * FROM anon.versions()").fetchall()   # activates the environment
            conn.execute(PAUSE_BETWEEN_CHUNKS)
            conn.execute("SELECT pg_temp.pause_between_chunks(%s)", (key,))
            if budget:
                conn.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
            conn.execute(READS_STORED)
            result["stored"] = conn.execute("SELECT pg_temp.reads_stored(%s, NULL, NULL)",
                                            (release,)).fetchone()[0]
            try:
                result["report"] = report(conn, release)
            except psycopg.Error as exc:
                result["error"] = exc

    thread = threading.Thread(target=run_report)
    thread.start()
    try:
        wait_until(lambda: db.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND objid = %s", (key,)).fetchone()[0] > 0 or not thread.is_alive(),
            "the report waiting after its first chunk")
        assert thread.is_alive(), result
        # the source changes, then the storage is refreshed while the report waits
        db.execute("UPDATE many SET diagnosis = 'changed', salary = salary + 1 WHERE id % 2 = 0")
        if how == "plpy_anon":
            refresher = threading.Thread(target=lambda: _refresh(connect, release, result))
            refresher.start()
            time.sleep(1.0)        # it swaps, or waits for the report's lock
        else:      # the index made once the read has begun: no check before it sees it
            db.execute(sql.SQL("CREATE UNIQUE INDEX ON {}.r_classes (age, sex, zip, diagnosis, "
                               "salary)").format(rs))
            db.execute(sql.SQL("REFRESH MATERIALIZED VIEW CONCURRENTLY {}.r_classes").format(rs))
            refresher = None
    finally:
        holder.execute("SELECT pg_advisory_unlock(%s)", (key,))
        holder.close()
        thread.join(HANG)
        if how == "plpy_anon" and refresher is not None:
            refresher.join(HANG)
    assert "error" not in result, result.get("error")
    assert result["stored"], "the report did not read the stored classes: no attack"
    assert "refresh_error" not in result, result.get("refresh_error")
    after = report(db, release)
    assert after != before, "the refresh changed nothing: no attack"
    assert result["report"] in (before, after), "figures of two versions mixed"


def _refresh(connect, release, result):
    with connect() as conn:
        try:
            conn.execute("SELECT anon.refresh(%s)", (release,))
        except psycopg.Error as exc:
            result["refresh_error"] = exc


def test_a_custodians_index_on_its_storage_runs_nothing_as_the_dba(db, schema, people, connect,
                                                                   custodian):
    """The stored read plans the storage itself: a custodian who owns a compact release adds a
    partial index whose IMMUTABLE predicate runs its payload, which planning folds with the
    planner's rights. The DBA's report of that release is refused (the release is another
    role's) before anything plans the storage; nothing of the custodian's runs as the DBA."""
    role = custodian.role
    own = sql.Identifier(f"{schema}_cust")
    db.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(own, sql.Identifier(role)))
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema),
                                                                 sql.Identifier(role)))
    try:
        with custodian() as cust:
            s = own.as_string(cust)
            release = compact(cust, schema)
            cust.execute(PAYLOAD_FUNCTION.format(s=s, owner=sql.Literal(role).as_string(cust)))
            cust.execute(f"CREATE FUNCTION {s}.boom() RETURNS boolean LANGUAGE plpgsql IMMUTABLE "
                         f"AS $f$ BEGIN RETURN {s}.payload(); END $f$")
            cust.execute(f"CREATE INDEX ON {release}_classes (age) WHERE {s}.boom()")
        with connect() as dba:
            seen = notices(dba)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                dba.execute("SELECT count(*) FROM anon.risk_report(%s::regclass)", (release,))
        assert_payload_not_run(db, role, seen)
    finally:
        db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(own))
