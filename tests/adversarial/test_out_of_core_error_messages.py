"""Adversarial: an out-of-core build's errors read as the in-memory build's.

The out-of-core run is a Python generator (one region's rows in memory at a time), so an error
it raises after PostgreSQL asked for its first slice -- a table that cannot satisfy the release's
entropy or recursive l-diversity, a cancel or timeout during the regions -- reaches SQL through
PL/Python's "error fetching next item from iterator", with the real message in the DETAIL behind
"plpy.Error: ". The caller, anon.releases.last_error and anon.refresh_history must read the real
message, as the same table at the default budget says it (22023, naming the figure). NULL as the
release id of the internal run names no Python ``None`` either."""
from __future__ import annotations

import psycopg
import pytest

from tests.helpers import release_schema_of

ENTROPY_BELOW_2 = ("CREATE TABLE t AS SELECT i AS id, i % 40 AS a, CASE WHEN i % 100 = 0 THEN 'rare' "
                   "WHEN i % 3 = 0 THEN 'x' ELSE 'common' END AS s FROM generate_series(1, 6000) i")


def build_error(connect, schema, budget: str, models: str) -> psycopg.Error:
    with connect(options=f"-c search_path={schema}") as c:
        c.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
        with pytest.raises(psycopg.Error) as caught:
            c.execute("SELECT anon.mondrian_view('t', 4, quasi_identifiers => ARRAY['a'], sensitive => ARRAY['s'], "
                      f"release_schema => %s, {models})", (release_schema_of(schema),))
    return caught.value


@pytest.mark.parametrize("models", ["l => 2, l_diversity => 'entropy'",
                                    "l => 3, l_diversity => 'recursive', c => 1"])
def test_an_out_of_core_build_names_the_model_the_table_cannot_satisfy_as_in_memory(
        db, schema, connect, models):
    db.execute(ENTROPY_BELOW_2)
    in_memory = build_error(connect, schema, "1GB", models)
    out_of_core = build_error(connect, schema, "8kB", models)
    assert in_memory.sqlstate == "22023"
    assert (out_of_core.sqlstate, out_of_core.diag.message_primary, out_of_core.diag.message_hint) == \
        (in_memory.sqlstate, in_memory.diag.message_primary, in_memory.diag.message_hint)


def test_a_failed_out_of_core_refresh_records_what_failed(db, schema, connect):
    db.execute("CREATE TABLE t AS SELECT i AS id, i % 40 AS a, (ARRAY['p', 'q', 'r'])[1 + i % 3] AS s "
               "FROM generate_series(1, 6000) i")
    with connect(options=f"-c search_path={schema}") as c:
        c.execute("SET plpy_anon.build_memory = '8kB'")
        rel = c.execute("SELECT anon.mondrian_view('t', 4, l => 2, l_diversity => 'entropy', "
                        "quasi_identifiers => ARRAY['a'], sensitive => ARRAY['s'], release_schema => %s)",
                        (release_schema_of(schema),)).fetchone()[0]
        c.execute("UPDATE t SET s = 'p' WHERE id % 100 <> 0")      # entropy of the table now < ln 2
        with pytest.raises(psycopg.Error) as caught:
            c.execute("SELECT anon.refresh(%s)", (rel,))
    last_error = db.execute("SELECT last_error FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                            "release_name) = %s", (rel,)).fetchone()[0]
    assert "entropy" in caught.value.diag.message_primary
    assert "entropy" in last_error


def test_the_partitioning_run_of_a_null_release_id_names_no_python_none(connect):
    with connect() as c, pytest.raises(psycopg.Error) as caught:
        c.execute("SELECT * FROM anon._mondrian_partition_slices(NULL)")
    assert "None" not in caught.value.diag.message_primary
