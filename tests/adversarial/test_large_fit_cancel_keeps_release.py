"""Adversarial: a plain Mondrian release of a million rows. Canceling its replacement mid-build
(pg_cancel_backend once its source is read, and statement_timeout) must leave the previous release
exactly as it was (same rows, same catalog row, no other relation in the release schema), and
the same backend must then build the same release again, to the same rows. The same for a
statement_timeout inside an out-of-core build of that table (a budget of 4MB)."""
from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest

from tests.helpers import release_schema_of
from tests.waits import HANG, wait_until

ROWS = 1_000_000


def build(schema: str) -> str:
    return (f"SELECT anon.mondrian_view('big', k => 5, quasi_identifiers => '{{a,b,c}}', "
            f"sensitive => '{{s}}', release_name => 'big_rel', replace => true, "
            f"release_schema => '{release_schema_of(schema)}')")


def snapshot(db, schema: str) -> tuple:
    rel_schema = release_schema_of(schema)
    digest = db.execute(f'SELECT count(*), md5(string_agg(r::text, \';\' ORDER BY r::text)) '
                        f'FROM "{rel_schema}".big_rel r').fetchone()
    relations = db.execute("SELECT array_agg(relname::text ORDER BY relname) FROM pg_class "
                           "WHERE relnamespace = %s::regnamespace", (rel_schema,)).fetchone()[0]
    catalog = db.execute("SELECT count(*), max(created_at)::text FROM anon.releases "
                         "WHERE release_schema = %s", (rel_schema,)).fetchone()
    return digest, relations, catalog


@pytest.mark.parametrize("stop, budget", [
    ("cancel", None), ("timeout", None),
    pytest.param("timeout", "4MB", marks=pytest.mark.slow)])           # two 1M builds: ~40 s)
def test_a_canceled_large_fit_leaves_the_previous_release_and_the_backend_whole(
        db, schema, connect, stop, budget):
    db.execute(f"""CREATE TABLE big AS
        SELECT g AS id, (g * 7919) % 100003 AS a, (g * 104729) % 50021 AS b, (g * 31) % 997 AS c,
               g % 7 AS s
        FROM generate_series(1::int8, {ROWS}) g""")
    conn = connect()
    conn.execute(f'SET search_path = "{schema}", public')
    seen: list[str] = []
    conn.add_notice_handler(lambda d: seen.append(d.message_primary or ""))
    conn.execute("SET plpy_anon.progress = on")
    if budget:                                  # out of core: regions read and fitted in turn
        conn.execute(f"SET plpy_anon.build_memory = '{budget}'")
    started = time.monotonic()
    conn.execute(build(schema))
    first_build = time.monotonic() - started
    before = snapshot(db, schema)
    if budget:
        metrics = db.execute("SELECT metrics FROM anon.releases WHERE release_schema = %s",
                             (release_schema_of(schema),)).fetchone()[0]
        metrics = metrics if isinstance(metrics, dict) else json.loads(metrics)
        assert metrics["out_of_core"]["regions"] > 1
    assert before[0][0] == ROWS
    seen.clear()
    outcome: dict = {}

    def run():
        try:
            conn.execute(build(schema))
        except psycopg.Error as error:
            outcome["error"] = error

    if stop == "timeout":               # a fraction of this machine's build: it fires mid-build
        conn.execute(f"SET statement_timeout = '{max(100, int(first_build * 300))}ms'")
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    if stop == "cancel":
        # at once after the read: the fit, the writing and the check of 1M rows are still ahead
        wait_until(lambda: any("read the source" in s for s in seen) or not worker.is_alive(),
                   "the build reading its source")
        assert db.execute("SELECT pg_cancel_backend(%s)", (conn.info.backend_pid,)).fetchone()[0]
    worker.join(HANG)
    assert not worker.is_alive()
    assert outcome.get("error") is not None, f"the build was not stopped: {seen}"
    assert outcome["error"].sqlstate == "57014", outcome["error"]
    assert snapshot(db, schema) == before
    conn.execute("RESET statement_timeout")
    conn.execute(build(schema))
    assert snapshot(db, schema)[0] == before[0]
    conn.close()
