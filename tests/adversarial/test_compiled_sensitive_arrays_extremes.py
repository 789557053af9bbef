"""Adversarial: a compact release's sensitive arrays written by the compiled class-literal writer
(a release of at least mondrian_jit.COMPILED_FROM_ROWS rows, even in a fresh backend), of values
at their types' edges: 20- and 40-digit numerics and NaN, float8 NaN, +-Infinity and -0,
int8's 2^63-1 and -2^63, dates at PostgreSQL's first and last days and +-infinity, and NULL
(an array column is refused by the compact layout, 22023). Checked from the released rows: each
row's sensitive values spelled as the source's (text equality, so -0 and NaN count), k."""
from __future__ import annotations

from psycopg import sql

from tests.adversarial.test_compiled_class_literals_odd_values import kernels_loaded
from tests.helpers import class_sizes

ROWS = 51_000
NUMERICS = ["12345678901234567890", "-99999999999999999999.5", "NaN", "0.00000000000000000001",
            "1234567890123456789012345678901234567890", None]
FLOATS = ["NaN", "Infinity", "-Infinity", "-0", "1.7976931348623157e308", "5e-324", None]
INTS = [str(2**63 - 1), str(-(2**63)), "0", None]
DATES = ["4713-01-01 BC", "5874897-12-31", "infinity", "-infinity", None]


def test_extreme_sensitive_values_through_the_compiled_writer_are_released_exactly(connect, schema):
    with connect() as conn:             # a fresh backend: the kernels load for the row count
        conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        conn.execute("CREATE TABLE ext (id int, a int, b int, n numeric, f float8, i int8, "
                     "d date)")
        conn.execute("""INSERT INTO ext SELECT g, g %% 97, g %% 13,
                            (%s::text[])[1 + g %% 6]::numeric, (%s::text[])[1 + g %% 7]::float8,
                            (%s::text[])[1 + g %% 4]::int8, (%s::text[])[1 + g %% 5]::date
                        FROM generate_series(1, %s) g""",
                     (NUMERICS, FLOATS, INTS, DATES, ROWS))
        rel = conn.execute(
            "SELECT anon.mondrian_view('ext', 5, quasi_identifiers => ARRAY['a', 'b'], "
            "sensitive => ARRAY['id', 'n', 'f', 'i', 'd'], layout => 'compact', "
            "release_schema => %s)", (f"{schema[:58]}_rel",)).fetchone()[0]
        assert kernels_loaded(conn)
        assert conn.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (ROWS, ROWS)
        wrong = conn.execute(f"""
            SELECT count(*) FILTER (WHERE r.n::text IS DISTINCT FROM t.n::text),
                   count(*) FILTER (WHERE r.f::text IS DISTINCT FROM t.f::text),
                   count(*) FILTER (WHERE r.i::text IS DISTINCT FROM t.i::text),
                   count(*) FILTER (WHERE r.d::text IS DISTINCT FROM t.d::text)
            FROM {rel} r JOIN ext t USING (id)""").fetchone()
        assert wrong == (0, 0, 0, 0)
        assert min(class_sizes(conn, rel, ["a", "b"])) >= 5
