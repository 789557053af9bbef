"""Adversarial: a SQL_ASCII database, whose texts are bytes PostgreSQL does not check: a
categorical QI holding bytes that are no UTF-8 (a LATIN1 é alone, a lone continuation byte,
0xFF) beside ASCII quotes, braces and 'NULL', released by the compiled class-literal writer (at
least mondrian_jit.COMPILED_FROM_ROWS rows) and by the joined literals, in memory and out of
core. Either released truthfully (every row's bytes in its class's set, k) or refused with a
clear error naming the column, with a hint, nothing built; never a set holding other bytes
(docs/security.md, "A SQL_ASCII database's bytes", says which and why)."""
from __future__ import annotations

import psycopg
import pytest

from tests.helpers import class_sizes, encoded_database

#: bytes as the client sends them (client_encoding SQL_ASCII: no conversion)
VALUES = [b"caf\xe9", b"\x80", b"\xff\xfe", b"plain", b'"q"', b"{a,b}", b"NULL", b""]


@pytest.fixture(scope="module")
def sql_ascii(connect):
    with encoded_database(connect, "SQL_ASCII", extension=False) as name:
        yield name


@pytest.mark.parametrize("rows, memory", [(600, "1GB"), (600, "8kB"), (51_000, "1GB")])
def test_non_utf8_bytes_of_a_sql_ascii_database_are_released_truthfully_or_refused(
        connect, sql_ascii, rows, memory):
    with connect(dbname=sql_ascii) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS plpy_anon CASCADE")
        conn.execute("SET client_encoding = 'SQL_ASCII'")
        table = f"bytes_{rows}_{memory.lower()}"
        conn.execute(f"CREATE TABLE {table} (id int, n int, w text, s text)")
        conn.execute(f"INSERT INTO {table} SELECT i, i %% 40, "
                     f"convert_from(('\\x' || (%s::text[])[1 + i %% %s])::bytea, 'SQL_ASCII'), "
                     f"'s' || i %% 3 FROM generate_series(1, %s) i",
                     ([v.hex() for v in VALUES], len(VALUES), rows))
        conn.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
        conn.execute("CREATE SCHEMA IF NOT EXISTS rel")
        try:
            rel = conn.execute(f"SELECT anon.mondrian_view('{table}', 5, quasi_identifiers => "
                               "ARRAY['n', 'w'], sensitive => ARRAY['id', 's'], "
                               "release_schema => 'rel')").fetchone()[0]
        except psycopg.Error as error:
            assert error.sqlstate != "38000", str(error)        # no Python traceback
            assert '"w"' in str(error) and error.diag.message_hint, str(error)
            # refused before anything was written
            assert conn.execute("SELECT count(*) FROM anon.releases WHERE source = %s::regclass",
                                (table,)).fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = "
                                "'rel'::regnamespace AND relname LIKE %s",
                                (f"{table}%",)).fetchone()[0] == 0
            return
        finally:
            conn.execute("RESET plpy_anon.build_memory")
        outside = conn.execute(f"""
            SELECT count(*) FROM {rel} r RIGHT JOIN {table} t USING (id)
            WHERE r.id IS NULL OR NOT (r.n @> t.n AND t.w::bytea = ANY (
                SELECT u::bytea FROM unnest(r.w) u))""").fetchone()[0]
        assert outside == 0
        assert min(class_sizes(conn, rel, ["n", "w"])) >= 5
