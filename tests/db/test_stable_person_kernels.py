"""A stable release's people are hashed, fingerprinted and found in its state by compiled
kernels loaded from the machine-code cache that ``make install`` warmed as the database's OS
user: after a server restart, a new backend's stable creation and refresh compile none of them
(numba's dispatcher statistics, read inside that backend), the state's rows read back as
read-only arrays included. The table is as large as one worth loading the kernels for
(mondrian_jit.COMPILED_FROM_ROWS)."""
from __future__ import annotations

import json

import psycopg

from plpy_anon.cluster import PG_BIN, ThrowawayCluster
from plpy_anon.core.mondrian_jit import COMPILED_FROM_ROWS
from tests.helpers import class_sizes, distinct_sensitive_per_class

TABLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, zip text, diagnosis text);
INSERT INTO people
SELECT i, 20 + (i * 37) % 60, (53700 + (i * 13) % 40)::text,
       (ARRAY['flu', 'asthma', 'gout', 'cold'])[1 + i % 4]
FROM generate_series(1, {rows}) i;
CREATE FUNCTION public.person_kernel_stats() RETURNS text LANGUAGE plpython3u AS $$
import json, sys
kern = sys.modules.get("plpy_anon.core._person_kernels")
if kern is None:
    return json.dumps(None)
from numba.core.dispatcher import Dispatcher
kernels = [f for f in vars(kern).values() if isinstance(f, Dispatcher)]
return json.dumps({"used": sorted(f.__name__ for f in kernels if f.signatures),
                   "cache_misses": sum(sum(f.stats.cache_misses.values()) for f in kernels)})
$$;
"""
QIS = ["age", "zip"]


def test_a_stable_refresh_after_a_restart_compiles_no_person_kernel():
    with ThrowawayCluster() as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            conn.execute(TABLE.replace("{rows}", str(COMPILED_FROM_ROWS)))
        cluster._run([PG_BIN / "pg_ctl", "-D", cluster.datadir, "-l", cluster.root / "server.log",
                      "-w", "restart"])
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            release = conn.execute(
                "SELECT anon.mondrian_view('people', k => 10, l => 2, quasi_identifiers => %s, "
                "sensitive => ARRAY['diagnosis'], refresh_mode => 'stable')", (QIS,)).fetchone()[0]
            conn.execute("DELETE FROM people WHERE id % 50 = 0")
            conn.execute("INSERT INTO people SELECT id + 1000000, age, zip, diagnosis FROM people "
                         "WHERE id % 50 = 1")
            conn.execute("SELECT anon.refresh(%s)", (release,))
            stats = json.loads(conn.execute("SELECT public.person_kernel_stats()").fetchone()[0])
            assert min(class_sizes(conn, release, QIS)) >= 10
            assert min(distinct_sensitive_per_class(conn, release, QIS, "diagnosis")) >= 2
    assert stats is not None, "the stable release's people were hashed in Python"
    assert {"salted_sha256", "siphash24", "find_sorted"} <= set(stats["used"]), stats
    assert stats["cache_misses"] == 0, stats
