"""A build's temporary files stay proportionate to its source (issue 27, point 6). The release
query's class literals were joined to the classes with every row carrying its whole slice of the
partitioning result: once that join spilled to disk (work_mem exceeded), each of its rows was
written with the slice, and a 2M-row table wrote more than 70 GB before the disk filled."""
from __future__ import annotations

import psycopg
import pytest

ROWS = 60000


@pytest.fixture
def synth(db, schema):
    db.execute("SELECT setseed(0.20261122)")
    db.execute(f"""
        CREATE TABLE synth AS SELECT (17 + floor(random() * 74))::int AS a_int,
          floor(random() * random() * 5000)::int AS b_int, floor(random() * 1000000)::int AS c_int,
          'd' || floor(random() * 5)::int AS d_txt, 'e' || floor(power(random(), 2) * 40)::int AS e_txt,
          'f' || lpad(floor(random() * 200)::int::text, 3, '0') AS f_txt, 's' || floor(random() * 12)::int AS s_txt
        FROM generate_series(1, {ROWS}) g""")
    return db.execute("SELECT pg_total_relation_size('synth')").fetchone()[0]


def test_a_build_whose_joins_spill_writes_temporary_files_in_proportion(connect, schema, release_schema, synth):
    """work_mem at its minimum makes every join spill; the build stays under a temp_file_limit of
    25 times the source (the previous query needed more than 3 GB here, 500 times the source)."""
    limit_kb = 25 * synth // 1024
    with connect() as conn:
        conn.execute(f"SET search_path = {schema}, public")
        conn.execute("SET work_mem = '64kB'")
        conn.execute(f"SET temp_file_limit = '{limit_kb}kB'")
        try:
            rel = conn.execute(
                "SELECT anon.mondrian_view('synth', k => 10, sensitive => ARRAY['s_txt'], release_schema => %s, "
                "quasi_identifiers => ARRAY['a_int','b_int','c_int','d_txt','e_txt','f_txt'])",
                (release_schema,)).fetchone()[0]
        except psycopg.errors.ConfigurationLimitExceeded as exc:
            pytest.fail(f"the build exceeded temp_file_limit = {limit_kb} kB: {exc}")
        assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == ROWS
        assert conn.execute(f"SELECT min(n) FROM (SELECT count(*) n FROM {rel} GROUP BY a_int, b_int, c_int, "
                            "d_txt, e_txt, f_txt) c").fetchone()[0] >= 10


def test_a_build_beyond_temp_file_limit_says_so_and_keeps_the_old_release(connect, schema, release_schema, synth):
    with connect() as conn:
        conn.execute(f"SET search_path = {schema}, public")
        rel = conn.execute("SELECT anon.mondrian_view('synth', k => 10, sensitive => ARRAY['s_txt'], "
                           "release_schema => %s, quasi_identifiers => ARRAY['a_int','d_txt'])",
                           (release_schema,)).fetchone()[0]
        conn.execute("INSERT INTO synth SELECT * FROM synth")
        conn.execute("SET work_mem = '64kB'")
        conn.execute("SET temp_file_limit = '1MB'")
        create_other = ("SELECT anon.mondrian_view('synth', k => 10, sensitive => ARRAY['s_txt'], "
                        f"release_schema => '{release_schema}', release_name => 'other', "
                        "quasi_identifiers => ARRAY['a_int','d_txt'])")
        for statement in (f"SELECT anon.refresh('{rel}')", create_other):
            with pytest.raises(psycopg.errors.ConfigurationLimitExceeded) as info:
                conn.execute(statement)
            diag = info.value.diag
            assert "temp_file_limit = 1MB" in diag.message_primary and "nothing was published" in diag.message_primary
            assert "plpy" not in diag.message_primary and "temp_file_limit" in diag.message_hint
        conn.execute("RESET temp_file_limit")
        assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == ROWS      # the old release
        assert conn.execute("SELECT to_regclass(%s)", (f"{release_schema}.other",)).fetchone()[0] is None
