"""Long Python work inside the backend honours pg_cancel_backend and statement_timeout within a
second of its own CPU: learning priorities from a pathological workload, a Mondrian fit of several
seconds, a stable-mode refresh. Each statement is run on its own connection and stopped from
another, once it is observed inside the work (a notice, the CPU it has used), never after a fixed
sleep; how late a stop is honoured is the CPU the backend spends after it, which a loaded machine
spreads over more wall time but does not make larger."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg import sql

from tests.helpers import release_schema_of
from tests.waits import HANG, cpu_seconds, wait_for_cpu, wait_until

#: how much CPU a backend may spend between a stop and its end (the checks run every 0.05 s)
WITHIN = 1.0


class Running:
    """``statement`` started on a new connection in a thread; notices collected with the time
    they arrived; ``error`` once the statement ended, and the backend's CPU seconds at its start
    (``cpu_started``), at a cancel (``cpu_canceled``) and at its end (``cpu_ended``)."""

    def __init__(self, connect, schema, statement, *setup):
        self.conn = connect()
        self.conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        for line in setup:
            self.conn.execute(line)
        self.pid = self.conn.info.backend_pid
        self.notices: list[tuple[float, str]] = []
        self.conn.add_notice_handler(
            lambda d: self.notices.append((time.monotonic(), d.message_primary or "")))
        self.error = self.ended = self.cpu_canceled = self.cpu_ended = None
        self.started = time.monotonic()
        self.cpu_started = cpu_seconds(self.pid)
        self.thread = threading.Thread(target=self._run, args=(statement,), daemon=True)
        self.thread.start()

    def _run(self, statement):
        try:
            self.conn.execute(statement).fetchall()
        except psycopg.Error as error:
            self.error = error
        self.cpu_ended = cpu_seconds(self.pid)
        self.ended = time.monotonic()

    def running(self) -> bool:
        return self.ended is None

    def saw(self, words) -> bool:
        return any(words in text for _, text in self.notices)

    def wait_for_notice(self, words):
        wait_until(lambda: self.saw(words) or not self.running(), f"a notice with {words!r}")
        assert self.saw(words), f"no notice with {words!r}: {self.notices}, error {self.error}"

    def wait_for_cpu(self, seconds, what):
        """Until the backend has used ``seconds`` more CPU inside the statement."""
        wait_for_cpu(self.pid, seconds, self.running, f"{what}; error {self.error}")

    def cancel(self, db) -> float:
        """Cancel from ``db``; the CPU seconds the backend used until the statement ended."""
        assert self.running(), f"ended before the cancel: {self.error}"
        self.cpu_canceled = cpu_seconds(self.pid)
        assert db.execute("SELECT pg_catalog.pg_cancel_backend(%s)", (self.pid,)).fetchone()[0]
        self.join()
        return self.cpu_ended - self.cpu_canceled

    def cpu(self) -> float:
        """The CPU seconds the backend used for the whole statement."""
        return self.cpu_ended - self.cpu_started

    def join(self) -> float:
        self.thread.join(HANG)
        assert not self.thread.is_alive(), "the statement outlived its stop by minutes"
        self.conn.close()
        return self.ended


def canceled(running):
    assert running.error is not None, "the statement finished instead of being canceled"
    assert running.error.sqlstate == "57014", running.error


# -- the workload learner --------------------------------------------------------------------
@pytest.fixture
def slow_workload(db, schema):
    """A workload that takes several times INTO_THE_PARSES and the 2 s timeout to learn: 600 IN
    lists of 3,000-3,600 numbers (~20 kB each, under the size bound; each length its own shape,
    parsed on its own; 200 of them learn in 3.8 s outside the backend on a quiet machine)."""
    db.execute("CREATE TABLE t (a int, b int)")
    db.execute("DELETE FROM anon.workload")
    db.execute("""
        INSERT INTO anon.workload (query, frequency)
        SELECT format('SELECT a FROM %%I.t WHERE b > 1 AND a IN (%%s%%s)', %s::text, l.items,
                      repeat(', 7', n)), 1
        FROM (SELECT string_agg(v::text, ', ') AS items FROM generate_series(1, 3000) v) l,
             generate_series(1, 600) n""", (schema,))
    yield "t"
    db.execute("DELETE FROM anon.workload")


LEARN = "SELECT * FROM anon.learn_priorities('t', use_pg_stat_statements => false)"
#: the backend imports numpy and pandas first (anon.versions does), out of the measured statement
WARM_UP = "SELECT anon.versions()"
#: CPU a learning backend spends before a cancel: sqlglot's import, then well into the parses
INTO_THE_PARSES = 1.5


def test_a_cancel_stops_learning_from_a_pathological_workload_within_a_second(
        db, schema, connect, slow_workload):
    running = Running(connect, schema, LEARN, WARM_UP)
    running.wait_for_cpu(INTO_THE_PARSES, "learning ended before the cancel")
    late = running.cancel(db)
    canceled(running)
    assert late < WITHIN, late


def test_statement_timeout_stops_learning_from_a_pathological_workload_within_a_second(
        db, schema, connect, slow_workload):
    running = Running(connect, schema, LEARN, WARM_UP, "SET statement_timeout = '2s'")
    running.join()
    canceled(running)
    assert "statement timeout" in str(running.error)
    # the backend used at most the 2 s of wall time before the timeout, then less than WITHIN
    assert running.cpu() < 2.0 + WITHIN, running.cpu()


def test_an_oversized_statement_is_skipped_with_a_notice_not_parsed(db, schema, connect):
    """A logged 4 MB statement (an IN list of 100,000 numbers, padded): counted, not parsed."""
    db.execute("CREATE TABLE t (a int, b int)")
    db.execute("DELETE FROM anon.workload")
    try:
        huge = "SELECT a FROM t WHERE a IN (" + ", ".join(map(str, range(100_000))) + ")" \
               + " " * (4_000_000 - 700_000)
        db.execute("SELECT anon.add_queries(%s)", ([huge, "SELECT a FROM t WHERE b > 3"],))
        running = Running(connect, schema, LEARN, "SET statement_timeout = '60s'")
        running.join()
        assert running.error is None, running.error
        assert running.cpu() < 15, running.cpu()            # parsing it would take minutes
        assert any("1 statements longer than 32768 bytes were skipped" in text
                   for _, text in running.notices), running.notices
        cuts = db.execute("SELECT cut_points FROM anon.workload_profiles "
                          "WHERE source = 't'::regclass").fetchone()[0]
        assert list(cuts) == ["b"]            # nothing learned from the skipped statement
    finally:
        db.execute("DELETE FROM anon.workload")


def test_the_size_bound_is_a_setting_and_a_bad_one_is_refused(db, schema, connect):
    db.execute("CREATE TABLE t (a int, b int)")
    db.execute("DELETE FROM anon.workload")
    try:
        db.execute("SELECT anon.add_queries(ARRAY['SELECT a FROM t WHERE b > 3 AND a < 100'])")
        with connect() as conn:
            conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
            conn.execute("SET plpy_anon.max_statement_size = '20 bytes'")
            with pytest.raises(psycopg.Error) as refused:   # nothing left: nothing reads t
                conn.execute(LEARN).fetchall()
            assert refused.value.sqlstate == "22000", refused.value
            assert "too_long: 1" in str(refused.value.diag.message_detail)
            conn.execute("SET plpy_anon.max_statement_size = 'lots'")
            with pytest.raises(psycopg.Error) as bad:
                conn.execute(LEARN).fetchall()
            assert bad.value.sqlstate == "22023" and "max_statement_size" in str(bad.value)
    finally:
        db.execute("DELETE FROM anon.workload")


# -- the Mondrian fit ------------------------------------------------------------------------
@pytest.fixture
def big_table(db, schema):
    """400,000 rows whose fit with split => 'utility' and k = 2 takes several seconds on an idle
    machine too (the read ~0.2 s idle, ~1 s loaded)."""
    db.execute("""
        CREATE TABLE big AS
        SELECT g AS id, (g * 7919) % 100003 AS a, (g * 104729) % 50021 AS b, (g * 31) % 997 AS c
        FROM generate_series(1::int8, 400000) g""")
    db.execute("ALTER TABLE big ADD PRIMARY KEY (id)")
    return "big"


def mondrian(schema):
    return (f"SELECT anon.mondrian_view('big', k => 2, quasi_identifiers => '{{a,b,c}}', "
            f"split => 'utility', release_schema => '{release_schema_of(schema)}', "
            f"replace => true)")


#: CPU a backend spends in the fit before the cancel (the fit takes several seconds of CPU)
INTO_THE_FIT = 0.3


def test_a_cancel_stops_a_mondrian_fit_within_a_second(db, schema, connect, big_table):
    running = Running(connect, schema, mondrian(schema), "SET plpy_anon.progress = on")
    running.wait_for_notice("read the source")
    running.wait_for_cpu(INTO_THE_FIT, "the build ended before the cancel")
    late = running.cancel(db)
    canceled(running)
    assert not running.saw("anonymized"), "the fit had ended"
    assert late < WITHIN, late


def test_statement_timeout_stops_a_mondrian_fit_within_a_second(db, schema, connect, big_table):
    """The timeout must fall in the fit: a first try at 4 s; a machine whose read outlasts it
    tries again with twice the time, one whose fit ends first with half the time it took."""
    timeout = 4.0
    for _ in range(4):
        running = Running(connect, schema, mondrian(schema), "SET plpy_anon.progress = on",
                          WARM_UP, f"SET statement_timeout = '{int(timeout * 1000)}ms'")
        running.join()
        read = [at for at, text in running.notices if "read the source" in text]
        fitted = [at for at, text in running.notices if "anonymized" in text]
        if read and not fitted:
            break
        timeout = (read[0] + (fitted[0] - read[0]) / 2 - running.started if fitted
                   else timeout * 2)
    canceled(running)
    assert read, "the timeout did not fall in the fit"
    assert not fitted, "the fit had ended"
    assert running.cpu() < timeout + WITHIN, (running.cpu(), timeout)


# -- the stable mode's refresh ---------------------------------------------------------------
def test_a_cancel_stops_a_stable_refresh_check_within_a_second(db, schema, connect):
    """The cancel falls in the cross-version check of the new version (as it starts, on 40,000
    people); the published version stays."""
    db.execute("""
        CREATE TABLE people AS
        SELECT g AS id, (g * 7919) % 100003 AS a, (g * 104729) % 50021 AS b,
               (ARRAY['flu', 'hiv', 'cold', 'ok', 'gout'])[1 + g % 5] AS dx
        FROM generate_series(1::int8, 60000) g""")
    db.execute("ALTER TABLE people ADD PRIMARY KEY (id)")
    release = db.execute(
        "SELECT anon.mondrian_view('people', k => 5, l => 2, quasi_identifiers => '{a,b}', "
        "sensitive => '{dx}', refresh_mode => 'stable', release_schema => %s)",
        (release_schema_of(schema),)).fetchone()[0]
    published = db.execute(f"SELECT count(*) FROM {release}").fetchone()[0]
    db.execute("DELETE FROM people WHERE id % 3 = 0")       # most classes fall below k: merges
    running = Running(connect, schema, f"SELECT anon.refresh('{release}')",
                      "SET plpy_anon.progress = on")
    running.wait_for_notice("against every version")
    late = running.cancel(db)
    canceled(running)
    assert late < WITHIN, late
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == published


def test_a_cancel_stops_refresh_all_not_only_the_release_it_falls_in(db, schema, connect):
    """anon.refresh_all records a release's failure and goes on with the others; a cancel or a
    timeout is no failure of one release and ends them all."""
    db.execute("""
        CREATE TABLE wide AS
        SELECT g AS id, (g * 7919) % 100003 AS a, (g * 104729) % 50021 AS b, (g * 31) % 997 AS c
        FROM generate_series(1::int8, 150000) g""")
    names = [db.execute(
        f"SELECT anon.mondrian_view('wide', k => {k}, quasi_identifiers => '{{a,b,c}}', "
        f"release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
        for k in (5, 6, 7)]
    running = Running(connect, schema, "SELECT * FROM anon.refresh_all()",
                      "SET plpy_anon.progress = on")
    running.wait_for_notice("read the source")
    late = running.cancel(db)
    canceled(running)
    assert late < WITHIN, late
    refreshed = db.execute(
        "SELECT count(*) FROM anon.refresh_history WHERE release_name = ANY(%s)",
        (names,)).fetchone()[0]
    assert refreshed <= 1                   # the one canceled, recorded as failed; no other
