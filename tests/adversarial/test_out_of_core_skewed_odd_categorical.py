"""Adversarial: out of core at tiny budgets, a categorical QI cut at the top in the fit's order
(by frequency, its regions' medians counted per value) whose one value holds 90 % of the rows,
with NULLs, a long tail of texts holding quotes, backslashes, braces, commas, whitespace only,
the empty text and 'NULL', under mixed-case quoted column names, in a partitioned source.
Checked from the released rows: every source row once, its values inside its class's, every
set exactly its class's values, k and l. A replace cancelled by statement_timeout, or a refresh
cancelled by pg_cancel_backend from another session, during the build leaves the previous
release readable, as it was, and no relation behind."""
from __future__ import annotations

import threading

import psycopg
import pytest

from tests.helpers import release_schema_of

ODD = ['"', "\\", "{", "}", ",", "{a,b}", " ", "\t", "", "NULL", "null", "a b", "é\"\\"]
ROWS = 12_000
SOURCE = """
CREATE TABLE "Src" ("Id" int, "Age Band" int, "Ville Name" text, "Diag" text) PARTITION BY RANGE ("Id");
CREATE TABLE "Src_lo" PARTITION OF "Src" FOR VALUES FROM (MINVALUE) TO (6000);
CREATE TABLE "Src_hi" PARTITION OF "Src" FOR VALUES FROM (6000) TO (MAXVALUE)"""
ROWS_OF = """
INSERT INTO "Src" SELECT i, i %% 37,
    CASE WHEN i %% 20 = 0 THEN NULL WHEN i %% 10 <> 1 THEN 'Bulk'
         ELSE (%(odd)s::text[])[1 + (i / 10) %% %(n)s] || (i %% 301)::text END,
    'd' || (i * 7) %% 5
FROM generate_series(1, %(rows)s) i"""


def load(db) -> None:
    db.execute(SOURCE)
    db.execute(ROWS_OF, {"odd": ODD, "n": len(ODD), "rows": ROWS})


def release(conn, schema: str, name: str) -> str:
    return conn.execute(
        "SELECT anon.mondrian_view('\"Src\"', 5, l => 2, "
        "quasi_identifiers => ARRAY['Age Band', 'Ville Name'], sensitive => ARRAY['Id', 'Diag'], "
        "release_schema => %s, release_name => %s, replace => true)",
        (release_schema_of(schema), name)).fetchone()[0]


def check_truthful(conn, rel: str) -> None:
    assert conn.execute(f'SELECT count(*), count(DISTINCT "Id") FROM {rel}').fetchone() == (ROWS, ROWS)
    outside = conn.execute(f"""
        SELECT count(*) FROM {rel} r JOIN "Src" t USING ("Id")
        WHERE NOT (r."Age Band" @> t."Age Band"
                   AND EXISTS (SELECT 1 FROM unnest(r."Ville Name") u
                               WHERE u IS NOT DISTINCT FROM t."Ville Name")
                   AND r."Diag" IS NOT DISTINCT FROM t."Diag")""").fetchone()[0]
    assert outside == 0
    # each set holds exactly the distinct values of its class's rows (NULL one of them)
    unequal = conn.execute(f"""
        SELECT count(*) FROM (
            SELECT r."Ville Name" AS w, count(DISTINCT coalesce(t."Ville Name", E'\\x01N')) AS held,
                   bool_and(t."Ville Name" IS NOT NULL) AS no_null
            FROM {rel} r JOIN "Src" t USING ("Id") GROUP BY r."Age Band", r."Ville Name") c
        WHERE cardinality(c.w) <> c.held
           OR (SELECT count(DISTINCT coalesce(u, E'\\x01N')) FROM unnest(c.w) u) <> c.held
           OR c.no_null = (array_position(c.w, NULL) IS NOT NULL)""").fetchone()[0]
    assert unequal == 0
    sizes = conn.execute(f'SELECT min(n), min(d) FROM (SELECT count(*) n, count(DISTINCT "Diag") d '
                         f'FROM {rel} GROUP BY "Age Band", "Ville Name") c').fetchone()
    assert sizes[0] >= 5 and sizes[1] >= 2


def out_of_core_regions(conn, rel: str) -> int:
    return conn.execute("SELECT (metrics->'out_of_core'->>'regions')::int FROM anon.releases "
                        "WHERE format('%%I.%%I', release_schema, release_name) = %s",
                        (rel,)).fetchone()[0] or 0


@pytest.mark.parametrize("budget", ["2kB", "64kB", "400kB"])
def test_skewed_odd_categorical_out_of_core_is_released_truthfully(db, schema, connect, budget):
    load(db)
    with connect(options=f"-c search_path={schema}") as conn:
        conn.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
        rel = release(conn, schema, "odd_ooc")
        assert out_of_core_regions(conn, rel) > 1, "the build did not go out of core"
        check_truthful(conn, rel)


def test_a_replace_cancelled_during_the_region_reads_keeps_the_previous_release(db, schema, connect):
    load(db)
    with connect(options=f"-c search_path={schema}") as conn:
        conn.execute("SET plpy_anon.build_memory = '2kB'")
        rel = release(conn, schema, "kept")
        before = conn.execute(f"SELECT md5(string_agg(r::text, '|' ORDER BY \"Id\")) FROM {rel} r"
                              ).fetchone()[0]
        db.execute('UPDATE "Src" SET "Diag" = \'changed\' WHERE "Id" % 3 = 0')
        cancelled = 0
        for timeout in ("30ms", "120ms", "400ms", "1200ms"):
            conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout,))
            try:
                release(conn, schema, "kept")
            except psycopg.errors.QueryCanceled:
                cancelled += 1
            finally:
                conn.execute("RESET statement_timeout")
            after = conn.execute(f"SELECT md5(string_agg(r::text, '|' ORDER BY \"Id\")) FROM {rel} r"
                                 ).fetchone()[0]
            if after != before:         # the replace completed: the new release is whole
                check_truthful(conn, rel)
                break
        assert cancelled >= 1
        leftovers = conn.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                                 (release_schema_of(schema),)).fetchone()[0]
        assert leftovers == 1


def test_a_refresh_cancelled_by_another_session_leaves_the_release_and_no_half_built_relation(
        db, schema, connect):
    load(db)
    with connect(options=f"-c search_path={schema}") as conn:
        conn.execute("SET plpy_anon.build_memory = '2kB'")
        rel = release(conn, schema, "refreshed")
        relations = db.execute("SELECT count(*) FROM pg_class WHERE relnamespace = %s::regnamespace",
                               (release_schema_of(schema),)).fetchone()[0]
        before = conn.execute(f"SELECT md5(string_agg(r::text, '|' ORDER BY \"Id\")) FROM {rel} r"
                              ).fetchone()[0]
        db.execute('UPDATE "Src" SET "Diag" = \'changed\' WHERE "Id" % 3 = 0')
        pid = conn.info.backend_pid
        cancelled = 0
        for delay in (0.05, 0.2, 0.6, 1.5):
            timer = threading.Timer(delay, lambda: db.execute("SELECT pg_cancel_backend(%s)", (pid,)))
            timer.start()
            try:
                conn.execute("SELECT anon.refresh(%s)", (rel,))
            except psycopg.errors.QueryCanceled:
                cancelled += 1
            finally:
                timer.join()
            try:
                conn.execute("SELECT pg_sleep(0.05)")   # a cancel sent after the refresh lands here
            except psycopg.errors.QueryCanceled:
                pass
            after = conn.execute(f"SELECT md5(string_agg(r::text, '|' ORDER BY \"Id\")) FROM {rel} r"
                                 ).fetchone()[0]
            now = db.execute("SELECT count(*) FROM pg_class WHERE relnamespace = %s::regnamespace",
                             (release_schema_of(schema),)).fetchone()[0]
            assert now == relations
            if after != before:
                check_truthful(conn, rel)
                break
        assert cancelled >= 1
