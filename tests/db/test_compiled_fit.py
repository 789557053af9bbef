"""Releases are fitted by the compiled Mondrian kernels loaded from the machine-code cache that
``make install`` warmed as the database's OS user: after a server restart, a new backend's
releases compile nothing, the writers of their sensitive arrays and ranges included (the kernels'
statistics, read inside that backend), and a release in the fresh mode loads the fit's object
file without importing numba (core.kernel_objects). The table
is as large as a table whose fit is worth loading the kernels for (mondrian_jit.COMPILED_FROM_ROWS;
a smaller one fits on numpy: tests/db/test_cold_start.py)."""
from __future__ import annotations

import json

import psycopg

from plpy_anon.cluster import PG_BIN, ThrowawayCluster
from plpy_anon.core.mondrian_jit import COMPILED_FROM_ROWS
from tests.helpers import class_sizes, distinct_sensitive_per_class

TABLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, zip text, born date, diagnosis text);
INSERT INTO people
SELECT i, 20 + (i * 37) % 60, (53700 + (i * 13) % 40)::text, DATE '1950-01-01' + (i * 97) % 20000,
       (ARRAY['flu', 'asthma', 'gout', 'cold'])[1 + i % 4]
FROM generate_series(1, {rows}) i;
CREATE FUNCTION public.kernel_stats() RETURNS text LANGUAGE plpython3u AS $$
import json, sys
jit = sys.modules.get("plpy_anon.core.mondrian_jit")
return json.dumps(dict(jit.stats(), numba_imported="numba" in sys.modules) if jit else None)
$$;
"""
QIS = ["age", "zip", "born"]


def test_releases_after_a_restart_load_the_kernels_and_compile_nothing():
    with ThrowawayCluster() as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            conn.execute(TABLE.format(rows=COMPILED_FROM_ROWS))
        cluster._run([PG_BIN / "pg_ctl", "-D", cluster.datadir, "-l", cluster.root / "server.log",
                      "-w", "restart"])
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            plain = conn.execute("SELECT anon.mondrian_view('people', k => 10, "
                                 "quasi_identifiers => %s)", (QIS,)).fetchone()[0]
            after_plain = json.loads(conn.execute("SELECT public.kernel_stats()").fetchone()[0])
            diverse = conn.execute("SELECT anon.mondrian_view('people', k => 10, l => 3, "
                                   "quasi_identifiers => %s, sensitive => ARRAY['diagnosis'])",
                                   (QIS,)).fetchone()[0]
            # the default build's diagnosis arrays (no l: the fresh mode, written from the read)
            arrays = conn.execute("SELECT anon.mondrian_view('people', k => 10, quasi_identifiers "
                                  "=> %s, sensitive => ARRAY['diagnosis'], release_name => "
                                  "'people_arrays')", (QIS,)).fetchone()[0]
            stats = json.loads(conn.execute("SELECT public.kernel_stats()").fetchone()[0])
            loaded = [conn.execute("SELECT metrics -> 'timing' -> 'phases' ->> 'load_kernels' FROM "
                                   "anon.releases WHERE format('%%I.%%I', release_schema, "
                                   "release_name) = %s", (release,)).fetchone()[0]
                      for release in (plain, diverse)]
            assert min(class_sizes(conn, plain, QIS)) >= 10
            assert min(class_sizes(conn, diverse, QIS)) >= 10
            assert min(distinct_sensitive_per_class(conn, diverse, QIS, "diagnosis")) >= 3
            assert conn.execute(f"SELECT count(*) FROM {arrays}").fetchone()[0] == COMPILED_FROM_ROWS
    assert stats is not None, "the releases did not run the compiled fit"
    assert stats["signatures"] >= 1
    assert "write_class_sets" in stats["used"], "the diagnosis arrays were joined in Python"
    assert "write_range_literals" in stats["used"], "the age and birth ranges were joined in Python"
    assert stats["cache_hits"] >= 1 and stats["cache_misses"] == 0, stats
    # the fit's object file make install wrote beside numba's cache: a release in the fresh mode
    # loads it without importing numba (the stable mode's kernels of the l-diverse one do)
    assert after_plain["machine_code"] == "objects", after_plain
    assert not after_plain["numba_imported"], after_plain
    assert after_plain["cache_hits"] >= 1 and after_plain["cache_misses"] == 0, after_plain
    # the backend's first compiled fit loads the kernels, in a phase of its own; the next one
    # finds them loaded
    assert loaded[0] is not None and float(loaded[0]) > float(loaded[1] or 0), loaded

