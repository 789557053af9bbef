"""Adversarial: class literals written by the compiled writer (class_sets), which a release of at
least mondrian_jit.COMPILED_FROM_ROWS rows takes even in a fresh backend. A categorical QI and a
sensitive column hold every ASCII character alone, quotes, backslashes, braces, commas,
whitespace-only texts, the empty text, 'NULL' and 'null', NULL, other scripts (4-byte UTF-8,
U+FFFF, combining marks) and the packing's usual separators, in a UTF-8 and a LATIN1 database
(where only ASCII separators are spelled). Checked from the released rows: every source row
once, its QI value inside its class's set, its sensitive value exact; every set holds only
values its class's rows hold; classes of k rows and l distinct sensitive values."""
from __future__ import annotations

import pytest
from psycopg import sql

from tests.helpers import class_sizes, distinct_sensitive_per_class, encoded_database

ROWS = 51_000
ASCII = [chr(c) for c in range(1, 128)]
SPECIAL = ["", None, "NULL", "null", " ", "\t \n", '"', "\\", "{", "}", ",", "{a,b}", '"x","y"',
           "a\\\"b", "\x1f\x1e\x1d\x1c"]
WIDE = ["ünï €", "\U0001F600", "\uFFFF", "e\u0301", "\U0010FFFF", "日本"]
QIS = ["n", "w"]


def load(conn, table: str, values: list) -> None:
    conn.execute(f"CREATE TABLE {table} (id int, n int, w text, s text)")
    conn.execute(f"""INSERT INTO {table}
                     SELECT i, i %% 211, v[1 + i %% cardinality(v)], v[1 + (i * 7 + 3) %% cardinality(v)]
                     FROM generate_series(1, %s) i, (SELECT %s::text[] v) a""", (ROWS, values))


def release(conn, table: str, layout: str) -> str:
    conn.execute("CREATE SCHEMA IF NOT EXISTS rel_odd")
    return conn.execute(sql.SQL(
        "SELECT anon.mondrian_view({}, 5, l => 2, quasi_identifiers => ARRAY['n', 'w'], "
        "sensitive => ARRAY['id', 's'], layout => {}, release_schema => 'rel_odd', "
        "replace => true)").format(sql.Literal(table), sql.Literal(layout))).fetchone()[0]


def kernels_loaded(conn) -> bool:
    """Whether this backend's release ran on the compiled kernels (the writer's precondition)."""
    seen = []
    conn.add_notice_handler(lambda d: seen.append(d.message_primary))
    conn.execute("""DO $$
        import sys
        jit = sys.modules.get("plpy_anon.core.mondrian_jit")
        plpy.notice(str(jit is not None and jit._kernels is not None))
        $$ LANGUAGE plpython3u""")
    return seen[-1] == "True"


def check_truthful(conn, rel: str, table: str) -> None:
    assert conn.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (ROWS, ROWS)
    outside = conn.execute(f"""
        SELECT count(*) FROM {rel} r JOIN {table} t USING (id)
        WHERE NOT (r.n @> t.n
                   AND EXISTS (SELECT 1 FROM unnest(r.w) u WHERE u IS NOT DISTINCT FROM t.w)
                   AND r.s IS NOT DISTINCT FROM t.s)""").fetchone()[0]
    assert outside == 0
    # a class's set is exactly the distinct values of its rows (nothing invented, nothing lost)
    unequal = conn.execute(f"""
        WITH c AS (SELECT r.n, r.w, array_agg(DISTINCT coalesce(t.w, E'\\x7f\\x7fNULL')) AS held
                   FROM {rel} r JOIN {table} t USING (id) GROUP BY r.n, r.w)
        SELECT count(*) FROM c
        WHERE NOT (held <@ (SELECT array_agg(coalesce(u, E'\\x7f\\x7fNULL')) FROM unnest(c.w) u)
                   AND (SELECT array_agg(coalesce(u, E'\\x7f\\x7fNULL')) FROM unnest(c.w) u) <@ held
                   AND cardinality(c.w) = cardinality(held))""").fetchone()[0]
    assert unequal == 0
    assert min(class_sizes(conn, rel, QIS)) >= 5
    assert min(distinct_sensitive_per_class(conn, rel, QIS, "s")) >= 2


@pytest.mark.parametrize("layout", ["flat", "compact"])
def test_odd_texts_written_by_the_compiled_writer_are_released_truthfully(connect, schema, layout):
    with connect() as conn:           # a fresh backend: the kernels load for the row count
        conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        load(conn, "odd_utf8", ASCII + SPECIAL + WIDE)
        rel = release(conn, f'"{schema}".odd_utf8', layout)
        assert kernels_loaded(conn)
        check_truthful(conn, rel, "odd_utf8")


@pytest.fixture(scope="module")
def latin1(connect):
    with encoded_database(connect, "LATIN1") as name:
        yield name


@pytest.mark.parametrize("layout", ["flat", "compact"])
def test_odd_texts_in_latin1_written_by_the_compiled_writer_are_released_truthfully(
        connect, latin1, layout):
    with connect(dbname=latin1) as conn:
        conn.execute("SET client_encoding = 'UTF8'")
        table = f"odd_{layout}"
        # two ASCII characters left free: a column holding all 127 has no separator (54000)
        load(conn, table, [c for c in ASCII + SPECIAL if c is None or "\x1e" not in c
                           and "\x1f" not in c] + ["ÿé", "\xa0", "ß"])
        rel = release(conn, table, layout)
        assert kernels_loaded(conn)
        check_truthful(conn, rel, table)
