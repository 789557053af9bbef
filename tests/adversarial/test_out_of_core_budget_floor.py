"""Adversarial: a tiny plpy_anon.build_memory (any role sets it in its session, as work_mem) does
not make an out-of-core build blow up.

At a budget smaller than a few rows, the regions go on halving until each holds fewer than 2k rows,
and each level asks one query grouping every region by a CASE of all their predicates, over the
whole table: thousands of branches per row at deep levels, so the work grows with rows x regions.
With the JIT on (PostgreSQL's default; it compiles any query costed above jit_above_cost) each such
query is also compiled in one step that no cancel, statement_timeout or termination interrupts: a
200,000-row table at '1kB' ignored pg_cancel_backend and pg_terminate_backend for over ten minutes
(in LLVM's optimizer, called from ExecScan). Here the JIT is off, so the timeout below is honoured:
the build must finish within IN_MEMORY_TIMES the in-memory build of the same table, timed just
before on the same machine (about a second on a quiet one), so that a loaded machine slows both."""
from __future__ import annotations

import time

import psycopg

from tests.helpers import class_sizes, release_schema_of

#: how many times the in-memory build's time the out-of-core one may take
IN_MEMORY_TIMES = 20


def test_a_tiny_build_budget_keeps_an_out_of_core_build_within_a_bounded_time(db, schema, connect):
    db.execute("CREATE TABLE t AS SELECT i AS id, (i::int8 * 7919) % 100 AS a, "
               "(i::int8 * 104729) % 1000 AS b, (i % 97)::numeric AS d, 's' || (i % 5) AS s "
               "FROM generate_series(1, 20000) i")
    build = ("SELECT anon.mondrian_view('t', 2, quasi_identifiers => ARRAY['a', 'b', 'd'], "
             "sensitive => ARRAY['s'], release_schema => %s, replace => true)")
    with connect(options=f"-c search_path={schema}") as c:
        c.execute("SET jit = off")
        c.execute(build, (release_schema_of(schema),))        # the backend's imports, first
        started = time.monotonic()
        c.execute(build, (release_schema_of(schema),))        # in memory, on this machine now
        in_memory = time.monotonic() - started
        bound = max(5.0, IN_MEMORY_TIMES * in_memory)
        c.execute("SET plpy_anon.build_memory = '1kB'")
        c.execute("SELECT set_config('statement_timeout', %s, false)", (f"{int(bound * 1000)}ms",))
        try:
            rel = c.execute(build, (release_schema_of(schema),)).fetchone()[0]
        except psycopg.errors.QueryCanceled:
            raise AssertionError(f"an out-of-core build of 20,000 rows at a 1kB budget ran past "
                                 f"{bound:.1f} s ({IN_MEMORY_TIMES} times the in-memory build's "
                                 f"{in_memory:.2f} s)") from None
        assert c.execute("SELECT (metrics -> 'out_of_core' ->> 'regions')::int FROM anon.releases "
                         "WHERE release_schema = %s", (release_schema_of(schema),)).fetchone()[0] > 1
    assert min(class_sizes(db, rel, ["a", "b", "d"])) >= 2
