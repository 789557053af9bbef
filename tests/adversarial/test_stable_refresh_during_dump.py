"""Adversarial: a stable release refreshed while pg_dump runs (a nightly dump and a pg_cron
refresh). pg_dump reads the catalog, then locks the tables it dumps one by one and reads view
definitions; a refresh between the two that drops and re-creates the release's relations (its
view and its classes' materialized view get new OIDs at every stable refresh) makes the dump
fail. The dump must succeed, restore, and the restored release go on refreshing with its
entries and steps (every stored version but the newest has its step, the state is of the newest
version). The window is held open here by a lock on a table pg_dump reaches first."""
from __future__ import annotations

import subprocess
import threading
import uuid

import psycopg
import pytest
from psycopg import sql

from plpy_anon.cluster import PG_BIN
from tests.waits import blocked, wait_until

STEPS = """SELECT s.version, (SELECT pg_catalog.max(version) FROM anon.release_versions v
                              WHERE v.release_id = s.release_id),
                  (SELECT pg_catalog.array_agg(version ORDER BY version) FROM anon.release_versions v
                   WHERE v.release_id = s.release_id AND next_groups IS NULL)
           FROM anon.release_state s"""


@pytest.fixture
def two_databases(connect):
    names = [f"rv_dump_{uuid.uuid4().hex[:6]}", f"rv_restored_{uuid.uuid4().hex[:6]}"]
    with connect(dbname="postgres") as admin:
        for name in names:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield names
    with connect(dbname="postgres") as admin:
        for name in names:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_dump_taken_during_a_stable_refresh_succeeds_and_the_restored_release_refreshes(
        connect, two_databases, tmp_path):
    source, restored = two_databases
    with connect(dbname=source) as c:
        c.execute("CREATE EXTENSION plpy_anon CASCADE")
        c.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, dx text)")
        c.execute("CREATE TABLE held (x int)")      # older than the release: pg_dump locks it first
        c.execute("INSERT INTO pt SELECT g, g, (ARRAY['flu','hiv','cold','ok'])[1 + g % 4] "
                  "FROM generate_series(1, 40) g")
        release = c.execute("SELECT anon.mondrian_view('pt', k => 5, l => 2, quasi_identifiers => '{age}', "
                            "sensitive => '{dx}', identifiers => '{id}', refresh_mode => 'stable')").fetchone()[0]
        for i, age in ((3, 38), (8, 2)):
            c.execute("UPDATE pt SET age = %s, dx = 'cancer' WHERE id = %s", (age, i))
            c.execute("SELECT anon.refresh(%s)", (release,))
        where = ["-h", c.info.host, "-p", str(c.info.port), "-U", c.info.user]
    archive = tmp_path / "source.dump"
    refused = []

    refresher = connect(dbname=source)
    refresher_pid = refresher.info.backend_pid

    def refresh():
        with refresher as c:
            try:
                c.execute("UPDATE pt SET age = 37, dx = 'cancer' WHERE id = 13")
                c.execute("SELECT anon.refresh(%s)", (release,))
            except psycopg.Error as error:
                refused.append(error)

    def dump_waiting(watcher) -> bool:
        """pg_dump has read the catalog and waits for ``held``."""
        return watcher.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = %s AND "
            "application_name = 'pg_dump' AND cardinality(pg_blocking_pids(pid)) > 0)",
            (source,)).fetchone()[0]

    with connect(dbname=source) as blocker, blocker.transaction(), connect() as watcher:
        blocker.execute("LOCK held IN ACCESS EXCLUSIVE MODE")
        dump = subprocess.Popen([str(PG_BIN / "pg_dump"), *where, "-Fc", "-f", str(archive), source],
                                stderr=subprocess.PIPE, text=True)
        wait_until(lambda: dump_waiting(watcher) or dump.poll() is not None, "pg_dump waiting for held")
        refreshing = threading.Thread(target=refresh)
        refreshing.start()
        # the refresh runs in the window: it ends, or waits for a lock (then the dump goes first)
        wait_until(lambda: not refreshing.is_alive() or blocked(watcher, refresher_pid),
                   "the refresh ending or waiting")
    refreshing.join()
    assert dump.wait() == 0, dump.stderr.read()
    assert refused == []
    subprocess.run([str(PG_BIN / "pg_restore"), "--exit-on-error", *where, "-d", restored, str(archive)],
                   check=True, capture_output=True)
    with connect(dbname=restored) as c:
        c.execute("UPDATE pt SET age = 4, dx = 'cancer' WHERE id = 22")
        c.execute("SELECT anon.refresh(%s)", (release,))
        version, newest, without_step = c.execute(STEPS).fetchone()
        assert version == newest and without_step == [newest]
