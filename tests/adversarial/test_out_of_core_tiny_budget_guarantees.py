"""Adversarial: the out-of-core build at a budget of a few rows, on skewed data (one value of a
QI holds most rows, a long tail of singletons; a sensitive value rare outside the bulk), keeps k
and l on the released rows (the region floor makes regions of at most 1/64 of the table leaves
whatever the budget); and the JIT it switches off for its level queries is back for the session
whether the build succeeds or is cancelled inside it."""
from __future__ import annotations

import psycopg
import pytest

from tests.helpers import class_sizes, distinct_sensitive_per_class, release_schema_of

SKEWED = ("CREATE TABLE t AS SELECT i AS id, CASE WHEN i % 10 < 8 THEN 40 ELSE i END AS a, "
          "CASE WHEN i % 10 < 8 THEN 7 ELSE (i * 7919) % 500 END AS b, "
          "CASE WHEN i % 50 = 0 THEN 'rare' WHEN i % 10 < 8 THEN 'bulk' ELSE 's' || (i % 3) END AS s "
          "FROM generate_series(1, 6000) i")


@pytest.mark.parametrize("budget", ["1kB", "8kB"])
def test_a_tiny_budget_on_skewed_data_keeps_k_and_l_in_the_released_rows(db, schema, connect, budget):
    db.execute(SKEWED)
    with connect(options=f"-c search_path={schema}") as c:
        c.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
        rel = c.execute("SELECT anon.mondrian_view('t', 4, l => 2, quasi_identifiers => ARRAY['a', 'b'], "
                        "sensitive => ARRAY['s'], release_schema => %s)",
                        (release_schema_of(schema),)).fetchone()[0]
    metrics = db.execute("SELECT metrics FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                         "release_name) = %s", (rel,)).fetchone()[0]
    assert metrics["out_of_core"]["regions"] > 1, "the build did not go out of core"
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 6000
    assert min(class_sizes(db, rel, ["a", "b"])) >= 4
    assert min(distinct_sensitive_per_class(db, rel, ["a", "b"], "s")) >= 2


def test_the_sessions_jit_is_back_after_an_out_of_core_build_succeeds_or_is_cancelled(db, schema, connect):
    db.execute(SKEWED)
    with connect(options=f"-c search_path={schema}") as c:
        c.execute("SET jit = on")
        c.execute("SET plpy_anon.build_memory = '1kB'")
        build = ("SELECT anon.mondrian_view('t', 4, quasi_identifiers => ARRAY['a', 'b'], "
                 "release_schema => %s, replace => true)")
        with c.transaction():
            c.execute(build, (release_schema_of(schema),))
            assert c.execute("SHOW jit").fetchone() == ("on",)
        cancelled = 0
        for timeout in ("20ms", "50ms", "150ms", "400ms", "900ms"):
            with c.transaction():
                c.execute("SELECT set_config('statement_timeout', %s, true)", (timeout,))
                try:
                    with c.transaction():
                        c.execute(build, (release_schema_of(schema),))
                except psycopg.errors.QueryCanceled:
                    cancelled += 1
                assert c.execute("SHOW jit").fetchone() == ("on",)
        assert c.execute("SHOW jit").fetchone() == ("on",)
        assert cancelled, "no build was cancelled: the cancel path went untested"
