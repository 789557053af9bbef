"""Adversarial: a database whose server encoding is LATIN1 (not UTF-8). The read takes every
text there as bytes converted to UTF-8, and a slice's class literals travel as UTF-8 bytes
converted back by convert_from with separators chosen among the characters no literal holds.
Texts holding 0x01, 0x02, the packing's usual separators and LATIN1's upper half; and a class
whose value set holds every LATIN1 character, leaving the packing no separator LATIN1 spells. Checked from the released rows: each row inside its class's value set, k and l."""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.helpers import class_sizes, distinct_sensitive_per_class, encoded_database


@pytest.fixture(scope="module")
def latin1(connect):
    with encoded_database(connect, "LATIN1") as name, connect(dbname=name) as conn:
        conn.execute("SET client_encoding = 'UTF8'")
        yield conn


def release(conn, table: str, k: int, l: int | None, **extra) -> str:
    conn.execute("CREATE SCHEMA IF NOT EXISTS rel")
    args = sql.SQL("").join(sql.SQL(", {} => {}").format(sql.Identifier(a), sql.Literal(v))
                            for a, v in extra.items())
    return conn.execute(sql.SQL("SELECT anon.mondrian_view({}, {}, l => {}, quasi_identifiers => "
                                "ARRAY['n', 'w'], sensitive => ARRAY['id', 's'], "
                                "release_schema => 'rel'{})").format(
        sql.Literal(table), sql.Literal(k), sql.Literal(l), args)).fetchone()[0]


def outside(conn, rel: str, table: str) -> int:
    return conn.execute(f"""
        SELECT count(*) FROM {rel} r RIGHT JOIN {table} t USING (id)
        WHERE r.id IS NULL OR NOT (r.n @> t.n
              AND EXISTS (SELECT 1 FROM unnest(r.w) u WHERE u IS NOT DISTINCT FROM t.w)
              AND r.s IS NOT DISTINCT FROM t.s)""").fetchone()[0]


ODD = ["\x01", "a\x01b", "\x02", "", None, "\x1f", "\x1e\x1d\x1c", "ÿé", '"q"', "\\", "{x,y}", "NULL"]


@pytest.mark.parametrize("layout, memory", [("flat", "1GB"), ("compact", "1GB"), ("compact", "1kB")])
def test_odd_texts_in_a_latin1_database_are_released_truthfully(latin1, layout, memory):
    table = f"odd_{layout}_{memory}"
    latin1.execute(f"CREATE TABLE {table} (id int, n int, w text, s text)")
    with latin1.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)",
                        [(i, i % 17, ODD[i % len(ODD)], ODD[(i * 5 + 1) % len(ODD)])
                         for i in range(240)])
    latin1.execute("SET plpy_anon.read_chunk_blocks = 1")
    latin1.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
    try:
        rel = release(latin1, table, 4, 2, layout=layout)
    finally:
        latin1.execute("RESET plpy_anon.build_memory")
    if memory == "1kB":
        regions = latin1.execute("SELECT (metrics->'out_of_core'->>'regions')::int FROM anon.releases "
                                 "WHERE release_name = %s", (rel.split(".")[-1],)).fetchone()[0]
        assert regions > 1
    assert outside(latin1, rel, table) == 0
    assert min(class_sizes(latin1, rel, ["n", "w"])) >= 4
    assert min(distinct_sensitive_per_class(latin1, rel, ["n", "w"], "s")) >= 2


@pytest.mark.parametrize("layout", ["flat", "compact"])
def test_a_value_set_holding_every_ascii_character_but_two_is_released(latin1, layout):
    """One class of 251 rows whose QI is each LATIN1 character but 0x1c-0x1f once: its set's
    literal leaves only two ASCII characters (0x1e, 0x1f) to separate it."""
    table = f"almost_{layout}"
    latin1.execute(f"CREATE TABLE {table} (id int, n int, w text, s text)")
    latin1.execute(f"INSERT INTO {table} SELECT i, 1, chr(i), 's' || i % 3 FROM generate_series(1, 255) i "
                   "WHERE i NOT BETWEEN 28 AND 31")
    rel = release(latin1, table, 251, None, layout=layout)
    assert outside(latin1, rel, table) == 0
    assert class_sizes(latin1, rel, ["n", "w"]) == [251]


@pytest.mark.parametrize("layout", ["flat", "compact"])
def test_a_value_set_holding_every_latin1_character_is_refused_clearly_and_builds_nothing(
        latin1, layout):
    """One class of 255 rows whose QI is each LATIN1 character once: no character LATIN1 spells
    is left to separate its set's literal (UTF-8 servers find one past ASCII)."""
    table = f"every_{layout}"
    latin1.execute(f"CREATE TABLE {table} (id int, n int, w text, s text)")
    latin1.execute(f"INSERT INTO {table} SELECT i, 1, chr(i), 's' || i % 3 FROM generate_series(1, 255) i")
    with pytest.raises(psycopg.Error) as refused:
        release(latin1, table, 255, None, layout=layout)
    assert refused.value.sqlstate == "54000"
    assert "every ASCII character" in refused.value.diag.message_primary
    assert refused.value.diag.message_hint
    assert latin1.execute("SELECT pg_catalog.to_regclass(%s)", (f"rel.{table}",)).fetchone()[0] is None
    assert latin1.execute("SELECT count(*) FROM anon.releases WHERE release_name = %s",
                          (table,)).fetchone()[0] == 0


@pytest.mark.parametrize("seed", range(3))
def test_stable_refreshes_with_odd_identifiers_in_a_latin1_database_keep_k_l_and_pin_no_one(
        latin1, seed):
    """The stable mode's identifiers (0x01, 0x02, '', long and LATIN1 texts, duplicates made by
    churn) hashed from the reader's codes where every text is read as converted bytes, and its
    stored versions' values read packed the same way."""
    from tests.adversarial.test_stable_odd_identifiers import OddSequence

    name = f"stable{seed}"
    latin1.execute(f"CREATE SCHEMA {name}")
    latin1.execute(f"SET search_path = {name}, public")
    try:
        sequence = OddSequence(latin1, name, seed)
        assert sequence.run() == ({}, {})
        assert sequence.kept_after >= 1
    finally:
        latin1.execute("RESET search_path")
