"""anon.refresh against concurrent readers, for every release method with a refresh path.

* Issue 7: a reader whose snapshot predates the refresh (REPEATABLE READ, SERIALIZABLE) and reads
  the release after the refresh committed must see a complete release, old or new -- never an
  empty or partial one. ``CREATE MATERIALIZED VIEW ... AS`` + swap gave it an EMPTY relation (the
  new rows carry the refresher's transaction id, invisible to the older snapshot).
* Issue 8: a refresh waiting for a long reader must not sit in the lock queue in front of new
  readers; it retries with short lock attempts for ``plpy_anon.swap_wait``, then gives up with
  SQLSTATE 55P03, records the failure and keeps the old release.

Counts are read with plain SQL in separate sessions; nothing here goes through the extension's
code but ``anon.refresh`` itself.
"""
from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import psycopg
import pytest
from psycopg import sql

from plpy_anon.core.synthetic import make_enterprise
from tests.helpers import matview, release_schema_of
from tests.waits import HANG, backs_off, wait_until, wait_until_blocked

_names = itertools.count()
LEVELS = ("REPEATABLE READ", "SERIALIZABLE", "READ COMMITTED")


# ---------------------------------------------------------------------------- one release per method

PATIENTS = """
CREATE TABLE patients (id int PRIMARY KEY, name text, age int, sex text, zip text, diagnosis text);
INSERT INTO patients
SELECT i, 'name ' || i, 20 + (i * 37) % 60, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 20)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, 200) i;
SELECT anon.set_column_role('patients', 'name', 'identifier');
SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive');
"""


def grow_patients(db, first, last):
    db.execute("INSERT INTO patients SELECT i, 'n', 20 + i %% 50, 'F', '53701', 'flu' "
               "FROM generate_series(%s::int, %s::int) i", (first, last))


def make_mondrian(db, schema, cleanup, priorities=None):
    db.execute(PATIENTS)
    extra = ", priorities => %s::jsonb" if priorities else ""
    rel = db.execute(f"SELECT anon.mondrian_view('patients', k => 3, release_schema => %s{extra})",
                     (release_schema_of(schema), priorities) if priorities else (release_schema_of(schema),)).fetchone()[0]
    return rel, [rel], grow_patients


def make_prioritized(db, schema, cleanup):
    return make_mondrian(db, schema, cleanup, priorities='{"zip": 1}')


BM_PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, sex text, zip text, workclass text,
                     marital_status text, income text);
INSERT INTO people
SELECT i, 18 + (i * 37) % 52, CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END,
       (ARRAY['13000', '13500', '14000', '22000', '23000'])[1 + (i * 7) % 5],
       (ARRAY['Private', 'Gov', 'Self'])[1 + (i * 11) % 3],
       (ARRAY['Married', 'Divorced', 'Never-married'])[1 + (i * 13) % 3],
       CASE WHEN (i * 17) % 4 = 0 THEN '>50K' ELSE '<=50K' END
FROM generate_series(1, 400) i;
"""


def grow_people(db, first, last):
    db.execute("INSERT INTO people SELECT i, 30 + i %% 20, 'F', '13000', 'Gov', 'Married', '<=50K' "
               "FROM generate_series(%s::int, %s::int) i", (first, last))


def make_break_merge(db, schema, cleanup):
    db.execute(BM_PEOPLE)
    rel = db.execute(
        "SELECT anon.break_merge('people', k => 5, l => 2, sensitive => ARRAY['workclass', "
        "'marital_status', 'income'], quasi_identifiers => ARRAY['age', 'sex', 'zip'], "
        "identifiers => ARRAY['id'], release_name => 'bm', release_schema => %s)",
        (release_schema_of(schema),)).fetchone()[0]
    # every relation of the release, read in the same transaction: they must match one release
    return rel, [rel, f"{release_schema_of(schema)}.bm_qit", f"{release_schema_of(schema)}.bm_st_income", f"{release_schema_of(schema)}.bm_merged"], grow_people


TRUST_PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, sex text, job text, salary text);
INSERT INTO people
SELECT i, 18 + (i * 37) % 70, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (ARRAY['nurse', 'doctor', 'clerk', 'cashier'])[1 + (i * 7) % 4],
       CASE WHEN (i * 11) % 5 = 0 THEN '>50K' ELSE '<=50K' END
FROM generate_series(1, 400) i;
SELECT anon.set_column_role('people', 'salary', 'sensitive');
"""


def grow_trust_people(db, first, last):
    db.execute("INSERT INTO people SELECT i, 40, 'F', 'nurse', '<=50K' FROM generate_series(%s::int, %s::int) i",
               (first, last))


def make_trust(db, schema, cleanup):
    n = next(_names)
    role, requester, purpose = f"iso_role_{n}", f"iso_req_{n}", f"iso_purpose_{n}"
    db.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    cleanup.append(lambda: (
        db.execute("DELETE FROM anon.requesters WHERE role_name = %s", (role,)),
        db.execute("DELETE FROM anon.purposes WHERE purpose_name = %s", (purpose,)),
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role))),
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))))
    db.execute(TRUST_PEOPLE)
    db.execute("SELECT anon.add_requester(%s, role => %s)", (requester, role))
    db.execute("SELECT anon.define_purpose(%s, priorities => '{\"age\": 0.8, \"sex\": 0.2, \"job\": 0.5}')",
               (purpose,))
    for _ in range(5):
        db.execute("SELECT anon.record_interaction(%s, outcome => 'good')", (requester,))
    rel = db.execute("SELECT anon.trust_view('people', requester => %s, purpose => %s, k => 3, "
                     "release_schema => %s)", (requester, purpose, release_schema_of(schema))).fetchone()[0]
    return rel, [rel], grow_trust_people


PATTERN_PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, income numeric, score float8, salary text);
INSERT INTO people
SELECT i, 18 + (i * 37) % 70, 1000 + ((i * 7919) % 5000) / 100.0, ((i * 104729) % 1000) / 1000.0,
       CASE WHEN i % 4 = 0 THEN '>50K' ELSE '<=50K' END
FROM generate_series(1, 240) i;
"""


def grow_pattern_people(db, first, last):
    db.execute("INSERT INTO people SELECT i, 40, 1500, 0.5, '<=50K' FROM generate_series(%s::int, %s::int) i",
               (first, last))


def make_pattern(db, schema, cleanup):
    db.execute(PATTERN_PEOPLE)
    rel = db.execute("SELECT anon.pattern_view('people', columns => ARRAY['age', 'income', 'score'], "
                     "segment => 20, iterations => 100, seed => 1, sensitive => ARRAY['id', 'salary'], "
                     "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    return rel, [rel], grow_pattern_people


def grow_employees(db, first, last):
    db.execute("INSERT INTO employees SELECT name || '#' || g, perf_1, perf_2, perf_3, salary "
               "FROM employees, generate_series(%s::int, %s::int) g WHERE name NOT LIKE '%%#%%' LIMIT %s::int",
               (first, last, last - first + 1))


def make_fusion(db, schema, cleanup):
    employees, web = make_enterprise(n_employees=120, web_coverage=0.8, n_strangers=4, random_state=2)
    db.execute("CREATE TABLE employees (name text PRIMARY KEY, perf_1 int, perf_2 int, perf_3 int, "
               "salary numeric(10,2))")
    db.execute("CREATE TABLE web_facts (name text, title text, holdings float8)")
    for table, frame in (("employees", employees), ("web_facts", web)):
        with db.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(table))) as copy:
            for row in frame.itertuples(index=False):
                copy.write_row([None if isinstance(v, float) and np.isnan(v) else v for v in row])
    rel = db.execute("SELECT anon.fusion_resilient_view(source => 'employees', sensitive => 'salary', "
                     "identifier => 'name', auxiliary => 'web_facts', k_from => 4, k_to => 4, "
                     "known_fraction => 0.2, release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    return rel, [rel], grow_employees


METHODS = {"mondrian": make_mondrian, "prioritized": make_prioritized, "break_merge": make_break_merge,
           "trust": make_trust, "pattern": make_pattern, "fusion": make_fusion}


@pytest.fixture
def made(request, db, schema):
    cleanup = []
    yield lambda method: METHODS[method](db, schema, cleanup)
    db.execute(sql.SQL("DROP VIEW IF EXISTS {}.dba_summary").format(sql.Identifier(schema)))
    for step in cleanup:            # the schema fixture then drops the releases and the tables
        step()


def catalog_stats(db, name):
    schema, rel = name.replace('"', "").split(".")
    return db.execute("SELECT row_count, metrics, refreshed_at, refresh_seconds FROM anon.releases "
                      "WHERE release_schema = %s AND release_name = %s", (schema, rel)).fetchone()


def counts(conn, relations):
    return tuple(conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] for rel in relations)


# ---------------------------------------------------------------------------- issue 7

@pytest.mark.parametrize("method", list(METHODS))
def test_readers_at_every_isolation_level_see_a_complete_release_after_refresh(db, connect, made, method):
    name, relations, grow = made(method)
    next_id = 10_000
    for level in LEVELS:
        old = counts(db, relations)
        assert all(c > 0 for c in old)
        grow(db, next_id, next_id + 9)
        next_id += 10
        before = catalog_stats(db, name)
        with connect() as reader:
            reader.execute(f"BEGIN ISOLATION LEVEL {level}")
            reader.execute("SELECT 1")                      # the snapshot, taken before the refresh
            db.execute("SELECT anon.refresh(%s)", (name,))  # commits (autocommit)
            seen = counts(reader, relations)
            reader.execute("COMMIT")
        new = counts(db, relations)
        assert new != old, "the source grew: the new release must differ"
        # what the partitioning run measured reached the catalog row of the real release
        row_count, metrics, refreshed_at, seconds = catalog_stats(db, name)
        assert row_count in new and row_count != before[0]
        assert metrics is not None and seconds is not None and refreshed_at > before[2]
        if level == "READ COMMITTED":
            assert seen == new, (level, seen, new)
        else:                                   # old or new, whole: never 0, never a mix
            assert seen in (old, new), (level, seen, old, new)


def test_a_plain_refresh_and_anon_refresh_agree_for_an_old_snapshot(db, connect, made):
    """The reference behaviour: PostgreSQL's own REFRESH MATERIALIZED VIEW gives the old snapshot
    the new rows; anon.refresh must do no worse."""
    _, (rel,), grow = made("mondrian")
    grow(db, 201, 230)
    with connect() as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT 1")
        db.execute(f"REFRESH MATERIALIZED VIEW {matview(db, rel)}")
        assert counts(reader, [rel]) == (230,)
        reader.execute("COMMIT")


# ---------------------------------------------------------------------------- issue 8

def start_refresh(connect, name, attempt="50ms", wait="3s"):
    """anon.refresh in a thread of its own session (progress notices on); returns (thread,
    result dict: its backend's ``pid``, ``notices``, then ``row`` or ``error``, ``seconds``)."""
    conn = connect()
    result = {"pid": conn.info.backend_pid, "notices": []}
    conn.add_notice_handler(lambda d: result["notices"].append(d.message_primary or ""))
    conn.execute("SELECT set_config('plpy_anon.swap_lock_timeout', %s, false), "
                 "set_config('plpy_anon.swap_wait', %s, false), "
                 "set_config('plpy_anon.progress', 'on', false)", (attempt, wait))

    def go():
        t0 = time.monotonic()
        try:
            result["row"] = conn.execute("SELECT row_count FROM anon.refresh(%s)", (name,)).fetchone()
        except psycopg.Error as exc:
            result["error"] = exc
        finally:
            result["seconds"] = time.monotonic() - t0
            conn.close()

    thread = threading.Thread(target=go)
    thread.start()
    return thread, result


def wait_until_retrying(db, thread, result):
    """Until the refresh has built its release and failed an attempt at the swap's locks (it
    backs off before the next)."""
    wait_until(lambda: not thread.is_alive() or backs_off(db, result["pid"]),
               "the refresh backing off between attempts at its swap locks")
    assert thread.is_alive(), f"the refresh ended before trying for its locks: {result}"


def read_times(connect, relations, duration, blocked_after):
    """New readers, one after the other, for ``duration`` seconds: each read's wall time. A read
    blocked longer than ``blocked_after`` is cancelled by statement_timeout and reported as inf."""
    times = []
    with connect() as reader:
        reader.execute("SELECT set_config('statement_timeout', %s, false)", (blocked_after,))
        end = time.monotonic() + duration
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                counts(reader, relations)
            except psycopg.errors.QueryCanceled:
                times.append(float("inf"))
                continue
            times.append(time.monotonic() - t0)
            time.sleep(0.05)
    return times


def catalog_error(db, name):
    schema, rel = name.replace('"', "").split(".")
    return db.execute("SELECT r.last_error, h.sqlstate, h.succeeded FROM anon.releases r "
                      "LEFT JOIN LATERAL (SELECT sqlstate, succeeded FROM anon.refresh_history "
                      "WHERE release_id = r.release_id ORDER BY refresh_id DESC LIMIT 1) h ON true "
                      "WHERE r.release_schema = %s AND r.release_name = %s", (schema, rel)).fetchone()


@pytest.mark.parametrize("method, in_place", [("mondrian", False), ("mondrian", True), ("break_merge", False)])
def test_a_refresh_waiting_for_a_long_reader_never_blocks_new_readers(db, connect, made, method, in_place):
    """While the refresh tries for its locks (50 ms attempts, 5 s in all), new readers go on: none
    waits out the refresh (its whole wait) behind it; then it gives up and keeps the release."""
    name, relations, grow = made(method)
    if in_place:     # a DBA's view on the release: no swap possible, the REFRESH runs in place
        db.execute(f"CREATE VIEW dba_summary AS SELECT count(*) AS n FROM {name}")
    old = counts(db, relations)
    grow(db, 10_000, 10_009)
    with connect() as long_reader:
        long_reader.execute("BEGIN")
        counts(long_reader, relations[-1:])     # holds ACCESS SHARE (through a view, for break_merge)
        thread, result = start_refresh(connect, name, attempt="50ms", wait="5s")
        try:
            wait_until_retrying(db, thread, result)
            times = read_times(connect, relations, 2.0, blocked_after="5s")
            thread.join(HANG)
        finally:
            long_reader.execute("COMMIT")
            thread.join(HANG)
    assert len(times) >= 5 and float("inf") not in times, times
    error = result.get("error")
    assert isinstance(error, psycopg.errors.LockNotAvailable), result
    assert name.replace('"', "") in error.diag.message_primary and "gave up after waiting" in error.diag.message_primary
    assert "plpy_anon.swap_wait" in error.diag.message_hint
    assert result["seconds"] >= 5                                # never gives up early
    last_error, sqlstate, succeeded = catalog_error(db, name)
    assert "gave up" in last_error and (sqlstate, succeeded) == ("55P03", False)
    assert counts(db, relations) == old                          # the old release stayed
    # the long reader is gone: the same refresh now succeeds and clears the error
    db.execute("SELECT anon.refresh(%s)", (name,))
    assert counts(db, relations) != old
    assert catalog_error(db, name) == (None, None, True)


def test_a_refresh_whose_reader_finishes_during_the_retries_succeeds(db, connect, made):
    name, relations, grow = made("mondrian")
    grow(db, 201, 220)
    with connect() as long_reader:
        long_reader.execute("BEGIN")
        counts(long_reader, relations)
        thread, result = start_refresh(connect, name, attempt="50ms", wait="10min")
        wait_until_retrying(db, thread, result)
        long_reader.execute("COMMIT")
        thread.join(HANG)
    assert result.get("row") == (220,), result
    # it got its locks on a later attempt (the notice says so only after more than one)
    assert any("swap lock taken after" in n for n in result["notices"]), result["notices"]
    assert counts(db, relations) == (220,)


def test_bad_swap_settings_fail_clearly_and_keep_the_release(db, connect, made):
    name, relations, _ = made("mondrian")
    with connect() as conn:
        conn.execute("SET plpy_anon.swap_wait = 'forever'")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="plpy_anon.swap_wait") as info:
            conn.execute("SELECT anon.refresh(%s)", (name,))
        assert "'30s'" in info.value.diag.message_hint
    assert counts(db, relations) == (200,)


def test_break_merge_swap_keeps_its_views_and_falls_back_in_place_under_a_dba_view(db, made, schema):
    name, relations, grow = made("break_merge")
    role = f"iso_bm_reader_{next(_names)}"
    db.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    try:
        db.execute(sql.SQL("GRANT SELECT ON {}.bm_qit TO {}").format(sql.Identifier(release_schema_of(schema)), sql.Identifier(role)))
        db.execute(f"COMMENT ON VIEW {release_schema_of(schema)}.bm_merged IS 'weights per combination'")
        storage_before = db.execute("SELECT %s::regclass::oid", (name,)).fetchone()[0]
        grow(db, 10_000, 10_009)
        db.execute("SELECT anon.refresh(%s)", (name,))
        assert db.execute("SELECT %s::regclass::oid", (name,)).fetchone()[0] != storage_before   # swapped
        assert db.execute("SELECT has_table_privilege(%s, %s, 'SELECT')",
                          (role, f"{release_schema_of(schema)}.bm_qit")).fetchone()[0]
        assert db.execute("SELECT obj_description(%s::regclass, 'pg_class')",
                          (f"{release_schema_of(schema)}.bm_merged",)).fetchone()[0] == "weights per combination"
        assert db.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                          "WHERE n.nspname = %s AND c.relname LIKE '%%refresh%%'", (release_schema_of(schema),)).fetchone()[0] == 0
        assert counts(db, relations)[1] == 410                          # the QIT: one row per person
        # a DBA's view over the merge view: no swap possible, the storage refreshes in place
        db.execute(f"CREATE VIEW dba_summary AS SELECT count(*) AS n FROM {release_schema_of(schema)}.bm_merged")
        grow(db, 10_010, 10_019)
        storage_before = db.execute("SELECT %s::regclass::oid", (name,)).fetchone()[0]
        row = db.execute("SELECT row_count FROM anon.refresh(%s)", (name,)).fetchone()
        assert row == (420,) and counts(db, relations)[1] == 420
        assert db.execute("SELECT %s::regclass::oid", (name,)).fetchone()[0] == storage_before
    finally:
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


# ---------------------------------------------------------------------------- replace => true

REPLACE_CALLS = {
    "mondrian": "SELECT anon.mondrian_view('patients', k => 3, release_schema => %s, replace => true)",
    "mondrian_flat": "SELECT anon.mondrian_view('patients', k => 3, layout => 'flat', release_schema => %s, "
                     "replace => true)",
    "break_merge": "SELECT anon.break_merge('people', k => 5, l => 2, sensitive => ARRAY['workclass', "
                   "'marital_status', 'income'], quasi_identifiers => ARRAY['age', 'sex', 'zip'], "
                   "identifiers => ARRAY['id'], release_name => 'bm', release_schema => %s, replace => true)",
}


@pytest.mark.parametrize("method", list(REPLACE_CALLS))
def test_a_reader_waiting_for_a_replace_sees_the_whole_new_release(db, connect, made, schema, method):
    """A REPEATABLE READ or SERIALIZABLE reader whose snapshot predates a replace => true, and
    which waits for the replace's lock on the release, reads the new release whole: its rows are
    visible to every snapshot, as a refresh's are."""
    if method == "mondrian_flat":
        db.execute(PATIENTS)
        db.execute(REPLACE_CALLS[method].replace(", replace => true", ""), (release_schema_of(schema),))
        name = f"{release_schema_of(schema)}.patients_k3"
        relations, grow = [name], grow_patients
    else:
        name, relations, grow = made(method)
    next_id = 10_000
    for level in ("REPEATABLE READ", "SERIALIZABLE"):
        grow(db, next_id, next_id + 9)
        next_id += 10
        with connect() as writer, connect() as reader:
            reader.execute(f"BEGIN ISOLATION LEVEL {level}")
            reader.execute("SELECT 1")                         # the snapshot, before the replace
            writer.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
            writer.execute("BEGIN")
            writer.execute(REPLACE_CALLS[method], (release_schema_of(schema),))   # holds the release
            seen: dict = {}

            def read(seen=seen):
                seen["counts"] = counts(reader, relations)
            waiting = threading.Thread(target=read)
            waiting.start()
            wait_until_blocked(writer, reader.info.backend_pid, "the reader waiting for the replace")
            writer.execute("COMMIT")
            waiting.join(30)
            reader.execute("COMMIT")
        new = counts(db, relations)
        assert all(c > 0 for c in new)
        assert seen["counts"] == new, (level, seen, new)
