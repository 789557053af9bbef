"""anon.refresh / anon.refresh_all: readers keep the old release until the new one commits, a
failure is recorded and leaves the old release, dependency order, and what a swap carries over."""
from __future__ import annotations

import threading

import psycopg
import pytest

from tests.helpers import drop_statement, release_schema_of
from tests.waits import wait_until_blocked

TABLE = """
CREATE TABLE patients (id int PRIMARY KEY, name text, age int, sex text, zip text, diagnosis text);
INSERT INTO patients
SELECT i, 'name ' || i, 20 + (i * 37) % 60, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 20)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, {n}) i;
SELECT anon.set_column_role('patients', 'name', 'identifier');
SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive');
"""


@pytest.fixture
def patients(db, schema):
    db.execute(TABLE.format(n=200))
    return f"{schema}.patients"


def release(db, schema, name="r", k=3, source=None, layout=None):
    return db.execute("SELECT anon.mondrian_view(%s::regclass, k => %s, release_name => %s, "
                      "release_schema => %s, layout => %s)",
                      (source or f"{schema}.patients", k, name, release_schema_of(schema), layout)).fetchone()[0]


def add_rows(db, table, first, last):
    db.execute(f"INSERT INTO {table} SELECT i, 'n', 20 + i % 50, 'F', '53701', 'flu' "
               f"FROM generate_series({first}, {last}) i")


def count(conn, rel):
    return conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0]


def test_readers_see_the_old_release_while_the_new_one_builds(db, connect, schema, patients):
    rel = release(db, schema)
    add_rows(db, patients, 201, 260)
    refresher_result = {}
    with connect() as blocker, connect() as refresher, connect() as reader:
        # Hold the source so the refresh is stuck in its build phase for as long as we like.
        blocker.execute("BEGIN")
        blocker.execute(f"LOCK TABLE {patients} IN ACCESS EXCLUSIVE MODE")

        def run_refresh():
            try:
                refresher_result["row"] = refresher.execute("SELECT (anon.refresh(%s)).row_count", (rel,)).fetchone()
            except psycopg.Error as exc:        # pragma: no cover - reported by the assert below
                refresher_result["error"] = exc

        thread = threading.Thread(target=run_refresh)
        thread.start()
        wait_until_waiting(db, refresher)        # the refresh is now building (blocked on the source)
        reader.execute("SET lock_timeout = '2s'")
        # A plain REFRESH MATERIALIZED VIEW would hold the release locked here: this read would
        # time out. The build-and-swap leaves the old release readable, complete.
        assert count(reader, rel) == 200
        blocker.execute("COMMIT")
        thread.join(30)
        assert "error" not in refresher_result, refresher_result
        assert refresher_result["row"] == (260,)
        assert count(reader, rel) == 260


def test_a_reader_caught_by_the_swap_gets_the_new_release_not_an_error(db, connect, schema, patients):
    """The swap drops the old view: a reader that reached it just then waits for the commit and
    PostgreSQL re-resolves the name, so the reader sees the new release."""
    rel = release(db, schema)
    add_rows(db, patients, 201, 240)
    result = {}
    with connect() as refresher, connect() as reader:
        refresher.execute("BEGIN")
        refresher.execute("SELECT anon.refresh(%s)", (rel,))         # swapped, not committed

        def read():
            try:
                result["count"] = count(reader, rel)
            except psycopg.Error as exc:          # pragma: no cover - reported by the assert below
                result["error"] = exc

        thread = threading.Thread(target=read)
        thread.start()
        wait_until_waiting(db, reader)                                # blocked by the swap
        refresher.execute("COMMIT")
        thread.join(30)
    assert result == {"count": 240}


def wait_until_waiting(db, conn):
    """Until ``conn``'s backend waits for a lock (a new backend's imports first: seconds when the
    machine is loaded)."""
    wait_until_blocked(db, conn.info.backend_pid, "the session waiting for a lock")


def test_a_reader_looping_through_refreshes_never_sees_an_empty_or_partial_release(db, connect, schema, patients):
    rel = release(db, schema)
    seen, errors, stop = [], [], threading.Event()

    def read_loop():
        with connect() as reader:
            while not stop.is_set():
                try:
                    seen.append(count(reader, rel))
                except psycopg.Error as exc:
                    errors.append(exc)

    thread = threading.Thread(target=read_loop)
    thread.start()
    try:
        expected = {200}
        for last in (230, 260, 290):
            add_rows(db, patients, last - 29, last)
            db.execute("SELECT anon.refresh(%s)", (rel,))
            expected.add(last)
    finally:
        stop.set()
        thread.join(10)
    assert errors == []
    assert len(seen) > 10
    assert set(seen) <= expected                 # only whole releases: never 0, never a partial count


def status(db, rel):
    return db.execute("SELECT row_count, last_error, last_error_at, failures, refreshed_at "
                      "FROM anon.release_status() WHERE release = %s", (rel,)).fetchone()


def test_failed_refresh_is_recorded_and_keeps_the_old_release(db, schema, patients):
    rel = release(db, schema)
    refreshed_before = status(db, rel)[4]
    # a declared quasi-identifier disappears (DROP COLUMN is refused: the release's ranges are
    # computed from the column, so the materialized view depends on it)
    db.execute(f"ALTER TABLE {patients} RENAME COLUMN age TO years")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match='"age".*no longer exists') as info:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert "replace => true" in info.value.diag.message_hint     # the method's hint survives
    row_count, last_error, last_error_at, failures, refreshed_at = status(db, rel)
    assert 'column "age"' in last_error
    assert last_error_at is not None and failures == 1
    assert (row_count, refreshed_at) == (200, refreshed_before)   # catalog kept the old figures
    assert count(db, rel) == 200                                   # and the old release is there
    history = db.execute("SELECT succeeded, error, sqlstate FROM anon.refresh_history h "
                         "JOIN anon.releases r USING (release_id) WHERE format('%%I.%%I', r.release_schema, "
                         "r.release_name) = %s", (rel,)).fetchall()
    assert history == [(False, last_error, "22023")]


def test_a_later_success_clears_the_error(db, schema, patients):
    rel = release(db, schema)
    db.execute(f"ALTER TABLE {patients} RENAME COLUMN age TO years")
    with pytest.raises(psycopg.Error):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    db.execute(f"ALTER TABLE {patients} RENAME COLUMN years TO age")
    add_rows(db, patients, 201, 210)
    row = db.execute("SELECT row_count, last_error FROM anon.refresh(%s)", (rel,)).fetchone()
    assert row == (210, None)
    assert status(db, rel)[:2] == (210, None)
    outcomes = db.execute("SELECT succeeded FROM anon.refresh_history h JOIN anon.releases r USING (release_id) "
                          "WHERE r.release_schema = %s ORDER BY refresh_id", (release_schema_of(schema),)).fetchall()
    assert outcomes == [(False,), (True,)]


def test_a_dropped_release_relation_fails_clearly(db, schema, patients):
    rel = release(db, schema)                    # compact: the view analysts read goes
    db.execute(drop_statement(db, rel))
    with pytest.raises(psycopg.errors.UndefinedObject, match="no longer exists") as info:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert "drop_release" in info.value.diag.message_hint


def test_swap_keeps_owner_privileges_comment_and_indexes(db, schema, patients):
    rel = release(db, schema, layout="flat")
    db.execute("CREATE ROLE swap_reader")
    try:
        db.execute(f"GRANT SELECT ON {rel} TO swap_reader")
        db.execute(f"COMMENT ON MATERIALIZED VIEW {rel} IS 'nightly k=3'")
        db.execute(f"CREATE INDEX r_age ON {rel} USING gist (age)")
        oid_before = db.execute("SELECT %s::regclass::oid", (rel,)).fetchone()[0]
        db.execute("SELECT anon.refresh(%s)", (rel,))
        oid_after = db.execute("SELECT %s::regclass::oid", (rel,)).fetchone()[0]
        assert oid_after != oid_before                       # it really was swapped
        assert db.execute("SELECT has_table_privilege('swap_reader', %s, 'SELECT')", (rel,)).fetchone()[0]
        assert db.execute("SELECT obj_description(%s::regclass, 'pg_class')", (rel,)).fetchone()[0] == "nightly k=3"
        assert db.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexname = 'r_age'",
                          (release_schema_of(schema),)).fetchone()[0] == 1
        leftovers = db.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                               "WHERE n.nspname = %s AND c.relname LIKE '%%refresh%%'", (release_schema_of(schema),)).fetchone()[0]
        assert leftovers == 0
    finally:
        db.execute(f"REVOKE ALL ON {rel} FROM swap_reader")
        db.execute("DROP ROLE swap_reader")


def test_refresh_all_orders_dependents_after_their_releases_and_isolates_failures(db, schema, patients):
    base = release(db, schema, "base")
    # A release built on another release: a DBA's summary registered in the catalog. Its view
    # depends on base, so base must refresh first (and in place: it cannot be swapped).
    db.execute(f"CREATE MATERIALIZED VIEW {release_schema_of(schema)}.summary AS SELECT count(*) AS n FROM {base}")
    db.execute("INSERT INTO anon.releases (release_schema, release_name, source, method, schema_oid, release_owner) "
               "VALUES (%s, 'summary', %s::regclass, 'manual', %s::regnamespace, current_user::regrole)",
               (release_schema_of(schema), base, release_schema_of(schema)))
    try:
        check_refresh_all(db, schema, patients, base)
    finally:                                     # the fixture would drop base before summary
        db.execute("SELECT anon.drop_release(%s)", (f"{release_schema_of(schema)}.summary",))


def check_refresh_all(db, schema, patients, base):
    db.execute(f"CREATE TABLE {schema}.other (id int PRIMARY KEY, age int, sex text)")
    db.execute(f"INSERT INTO {schema}.other SELECT i, i % 40, 'F' FROM generate_series(1, 30) i")
    broken = release(db, schema, "broken", source=f"{schema}.other")
    db.execute(f"ALTER TABLE {schema}.other RENAME COLUMN sex TO gender")   # release depends on it
    add_rows(db, patients, 201, 250)
    results = db.execute("SELECT release, status, error FROM anon.refresh_all() "
                         "WHERE release LIKE %s", (f"{release_schema_of(schema)}.%",)).fetchall()
    order = [r[0] for r in results]
    assert order.index(f"{release_schema_of(schema)}.base") < order.index(f"{release_schema_of(schema)}.summary")
    outcome = {r[0]: (r[1], r[2]) for r in results}
    assert outcome[f"{release_schema_of(schema)}.base"] == ("refreshed", None)
    assert outcome[f"{release_schema_of(schema)}.summary"] == ("refreshed", None)
    assert outcome[broken][0] == "failed" and '"sex"' in outcome[broken][1]
    assert db.execute(f"SELECT n FROM {release_schema_of(schema)}.summary").fetchone()[0] == 250   # saw the new base
    assert status(db, broken)[1] is not None


@pytest.mark.parametrize("change", ["drop", "replace"])
def test_a_refresh_waiting_behind_a_drop_or_replace_fails_clearly(db, connect, schema, patients, change):
    """A refresh that finds its release being dropped or replaced waits for that transaction,
    then says what happened instead of failing on a relation that vanished under it."""
    rel = release(db, schema)
    with connect() as other, connect() as refresher:
        other.execute("BEGIN")
        if change == "drop":
            other.execute("SELECT anon.drop_release(%s)", (rel,))
        else:
            other.execute("SELECT anon.mondrian_view(%s::regclass, k => 4, release_name => 'r', "
                          "release_schema => %s, replace => true)",
                          (patients, release_schema_of(schema)))
        outcome = {}

        def refresh():
            try:
                refresher.execute("SELECT anon.refresh(%s)", (rel,))
            except psycopg.Error as error:
                outcome["error"] = error

        thread = threading.Thread(target=refresh)
        thread.start()
        wait_until_waiting(db, refresher)            # queued behind the drop / replace
        other.execute("COMMIT")
        thread.join(30)
    error = outcome.get("error")
    assert isinstance(error, psycopg.errors.UndefinedObject), outcome
    assert "was dropped or replaced while this refresh waited for it" in error.diag.message_primary
    exists = db.execute("SELECT to_regclass(%s) IS NOT NULL", (rel,)).fetchone()[0]
    assert exists == (change == "replace")
    if change == "replace":                          # the replacement is intact and verified
        assert db.execute("SELECT verified, (parameters->>'k')::int FROM anon.releases "
                          "WHERE release_schema = %s AND release_name = 'r'",
                          (release_schema_of(schema),)).fetchone() == (True, 4)


def test_the_generic_run_validates_the_stored_parameters_once_more(db, schema, patients):
    """The run behind every refresh checks the catalog's parameters against the method's
    constraints (db/method.py run): a k the entry point would refuse is refused here too."""
    rel = release(db, schema)
    db.execute("UPDATE anon.releases SET parameters = jsonb_set(parameters, '{k}', '1') "
               "WHERE format('%%I.%%I', release_schema, release_name) = %s", (rel,))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="k must be at least 2"):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert count(db, rel) == 200
