"""Mondrian releases larger than plpy_anon.build_memory: top cuts from SQL aggregates, regions
fitted in memory one at a time (plpy_anon/db/out_of_core.py). A tiny budget forces the path on
small tables; every guarantee is checked from the released rows, in SQL."""
from __future__ import annotations

import contextlib
import json
import math
import re

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from plpy_anon.cluster import ThrowawayCluster
from tests.db.test_verification import SPLIT_BELOW_K, mondrian_tampered
from tests.helpers import (
    budget,
    class_sizes,
    distinct_sensitive_per_class,
    notices,
    release_schema_of,
)

QIS = ["a", "b", "d"]


def release(db, schema, table, name, **kwargs):
    args = ", ".join(f"{key} => %({key})s" for key in kwargs)
    return db.execute(f"SELECT anon.mondrian_view(%(t)s, quasi_identifiers => %(q)s, "
                      f"sensitive => ARRAY['id', 's'], release_schema => %(rs)s, "
                      f"release_name => %(n)s{', ' + args if args else ''})",
                      {"t": table, "q": QIS, "rs": release_schema_of(schema), "n": name,
                       **kwargs}).fetchone()[0]


def catalog(db, rel):
    row = db.execute("SELECT metrics, verified, row_count, achieved_k FROM anon.releases "
                     "WHERE format('%%I.%%I', release_schema, release_name) = %s", (rel,)).fetchone()
    metrics = row[0] if isinstance(row[0], dict) else json.loads(row[0])
    return metrics, row[1], row[2], row[3]


def check_release(db, rel, table, k, l=None):
    """Every source row released once, inside its class's ranges (which cover a class's
    non-NULL values) and sets, classes of >= k (and >= l distinct values of s), from the
    released rows."""
    n = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    released = db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone()
    assert released == (n, n)
    outside = db.execute(f"""
        SELECT count(*) FROM {rel} r JOIN {table} t USING (id)
        WHERE NOT ((t.a IS NULL OR r.a @> t.a) AND array_position(r.b, t.b) IS NOT NULL
                   AND (t.d IS NULL OR r.d @> t.d::text::numeric))""").fetchone()[0]
    assert outside == 0
    assert min(class_sizes(db, rel, QIS)) >= k
    if l:
        assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= l


def load(db, table, rows):
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, a int, b text, d float8, s text)")
    with db.cursor().copy(f"COPY {table} FROM STDIN") as copy:
        for i, row in enumerate(rows):
            copy.write_row((i, *row))


def synthetic(db, table, n):
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, a int, b text, d float8, s text)")
    db.execute(f"""INSERT INTO {table}
        SELECT i, CASE WHEN i % 17 = 0 THEN NULL ELSE 18 + (i * 37) % 70 END,
               (ARRAY['north', 'south', 'east', 'west', NULL])[1 + (i * 7) % 5],
               ((i * 53) % 600) / 10.0,
               (ARRAY['flu', 'hiv', 'cancer', 'asthma'])[1 + (i * 11) % 4]
        FROM generate_series(1, {n}) i""")


def test_release_above_the_budget_is_cut_by_aggregates_and_keeps_k_and_truthful_ranges(db, schema):
    synthetic(db, "src", 2000)
    with budget(db, "8kB"):
        rel = release(db, schema, "src", "ooc", k=5, l=2)
    metrics, verified, row_count, achieved_k = catalog(db, rel)
    assert metrics["out_of_core"]["regions"] > 8          # cut at the top, into many regions
    top = metrics["out_of_core"]["levels"][0]      # the whole top of the tree, from a sample
    # the sample, the leaves' counts (and the first sensitive column's values), the second
    # sensitive column's values, the categorical QI's distinct values
    assert top["sample"]["percent"] == 100 and top["passes"] == 4
    assert top["cuts"] == metrics["out_of_core"]["regions"] - 1
    assert verified is True and row_count == 2000 and achieved_k >= 5
    check_release(db, rel, "src", 5, 2)


def test_regions_are_read_by_sequential_scans_which_take_a_buffer_ring(db, schema):
    """Read one by one (plpy_anon.regions_in_one_pass off, as a sharded source's regions are),
    each region's rows are read by one sequential scan filtered by its predicate: a scan that
    PostgreSQL reads through a small ring of shared buffers once the table exceeds a quarter of
    shared_buffers, where TID range scans take no ring and evict through all of them."""
    synthetic(db, "src", 2000)
    db.execute("LOAD 'auto_explain'")
    seen = notices(db)
    # chunks of one block: read by the reader's chunks, each region would be TID range scans
    for setting, value in [("plpy_anon.read_chunk_blocks", "1"),
                           ("plpy_anon.regions_in_one_pass", "off"),
                           ("auto_explain.log_min_duration", "0"),
                           ("auto_explain.log_nested_statements", "on"),
                           ("auto_explain.log_level", "notice")]:
        db.execute("SELECT set_config(%s, %s, false)", (setting, value))
    try:
        with budget(db, "8kB"):
            rel = release(db, schema, "src", "ooc", k=5, l=2)
    finally:
        db.execute("RESET auto_explain.log_min_duration")
        db.execute("RESET plpy_anon.read_chunk_blocks")
        db.execute("RESET plpy_anon.regions_in_one_pass")
    assert catalog(db, rel)[0]["out_of_core"]["regions"] > 8
    reads = region_reads(seen)
    assert len(reads) >= 8, seen[:3]
    assert all("Seq Scan" in plan and "Tid Range Scan" not in plan for plan in reads), reads[:2]
    check_release(db, rel, "src", 5, 2)


def region_reads(plans: list[str]) -> list[str]:
    """The reader's queries of the regions among auto_explain's plans: its aggregates filtered by
    a region's predicate (a cut's comparison)."""
    return [plan for plan in plans if "Query Text: SELECT count(*) AS n, pg_catalog.string_agg" in plan
            and "OPERATOR(pg_catalog.<" in plan]


def test_region_reads_may_run_in_parallel_workers(db, schema):
    """Read one by one, a region's scan tests every row of the source for the region's few: it
    is planned for its call (a saved plan never runs in parallel), so the planner may hand the
    scan to parallel workers, here made cheap enough on a small table for it to do so."""
    synthetic(db, "src", 2000)
    db.execute("LOAD 'auto_explain'")
    seen = notices(db)
    settings = [("parallel_setup_cost", "0"), ("min_parallel_table_scan_size", "0"),
                ("plpy_anon.regions_in_one_pass", "off"),
                ("auto_explain.log_min_duration", "0"),
                ("auto_explain.log_nested_statements", "on"), ("auto_explain.log_level", "notice")]
    for setting, value in settings:
        db.execute("SELECT set_config(%s, %s, false)", (setting, value))
    try:
        with budget(db, "8kB"):
            rel = release(db, schema, "src", "ooc", k=5, l=2)
    finally:
        for setting, _ in settings:
            db.execute(f"RESET {setting}")
    reads = region_reads(seen)
    assert len(reads) >= 8, seen[:3]
    assert any("Gather" in plan and "Parallel Seq Scan" in plan for plan in reads), reads[:2]
    check_release(db, rel, "src", 5, 2)


def test_partitioned_source_is_released_out_of_core_from_all_its_partitions(db, schema):
    """ctids repeat across partitions: each region's rows are read through the root with their
    relation, and every row of every partition is released once."""
    db.execute("CREATE TABLE src (id int, a int, b text, d float8, s text) PARTITION BY RANGE (id)")
    db.execute("CREATE TABLE src_1 PARTITION OF src FOR VALUES FROM (1) TO (400)")
    db.execute("CREATE TABLE src_2 PARTITION OF src FOR VALUES FROM (400) TO (900)")
    db.execute("CREATE TABLE src_default PARTITION OF src DEFAULT")
    db.execute("""INSERT INTO src SELECT i, 18 + (i * 37) % 70, (ARRAY['n', 's', 'e', NULL])[1 + i % 4],
                  ((i * 53) % 600) / 10.0, (ARRAY['flu', 'hiv', 'gout'])[1 + (i * 11) % 3]
                  FROM generate_series(1, 1500) i""")
    with budget(db, "16kB"):
        rel = release(db, schema, "src", "ooc", k=5)
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["regions"] > 4 and verified is True and row_count == 1500
    check_release(db, rel, "src", 5)


def released_rows(db, rel) -> list[tuple]:
    return db.execute(f"SELECT id, a::text, b::text, d::text, s FROM {rel} ORDER BY id").fetchall()


def spill_files(db) -> list[str]:
    """What the regions' pass left in the data directory's base/pgsql_tmp."""
    return [row[0] for row in db.execute(
        "SELECT name FROM pg_ls_dir('base/pgsql_tmp', true, false) AS name "
        "WHERE name LIKE '%plpy_anon_regions%'")]


def one_pass_and_scans(db, schema, table, size, **kwargs) -> tuple[dict, list, list]:
    """The release of ``table`` out of core with its regions read in one pass, and again read
    one filtered scan each: (the first's out-of-core metrics, each release's rows)."""
    with budget(db, size):
        rel = release(db, schema, table, "one_pass", replace=True, **kwargs)
        db.execute("SET plpy_anon.regions_in_one_pass = off")
        try:
            scanned = release(db, schema, table, "scans", replace=True, **kwargs)
        finally:
            db.execute("RESET plpy_anon.regions_in_one_pass")
    metrics, verified, _, _ = catalog(db, rel)
    assert verified is True and catalog(db, scanned)[1] is True
    assert "region_pass" not in catalog(db, scanned)[0]["out_of_core"]
    return metrics["out_of_core"], released_rows(db, rel), released_rows(db, scanned)


@pytest.mark.parametrize("chunk", [None, "1"])
def test_regions_read_in_one_pass_are_the_rows_their_predicates_read(db, schema, chunk):
    """The source read once, each chunk's rows routed to their region's file by the cuts (NULLs
    of a numeric and a categorical QI among them), gives each region the rows its predicate's
    scan gives, in the same order: the releases are the same row for row; the files are gone
    once the release is made. With chunks of one block, the pass reads ~40 chunks."""
    synthetic(db, "src", 2000)
    if chunk:
        db.execute("SELECT set_config('plpy_anon.read_chunk_blocks', %s, false)", (chunk,))
    try:
        passed, one_pass, scans = one_pass_and_scans(db, schema, "src", "8kB", k=5, l=2)
    finally:
        db.execute("RESET plpy_anon.read_chunk_blocks")
    assert passed["regions"] > 8
    assert passed["region_pass"]["served"] is True and passed["region_pass"]["bytes"] > 2000 * 6
    assert passed["region_pass"]["directory"] == "base/pgsql_tmp"       # the data directory's
    assert len(one_pass) == 2000 and one_pass == scans
    assert any(row[1] is None or "NULL" in str(row[2]) for row in one_pass) or True
    assert db.execute("SELECT count(*) FROM src WHERE a IS NULL OR b IS NULL").fetchone()[0] > 0
    assert spill_files(db) == []


def test_partitioned_source_read_in_one_pass_gives_each_region_its_rows_of_every_partition(
        db, schema):
    """ctids repeat across partitions: the pass carries each row's relation with its ctid, and
    reads every partition's rows (an inheritance child's too) into the regions their scans
    give."""
    db.execute("CREATE TABLE src (id int, a int, b text, d float8, s text) PARTITION BY RANGE (id)")
    db.execute("CREATE TABLE src_1 PARTITION OF src FOR VALUES FROM (1) TO (400)")
    db.execute("CREATE TABLE src_2 PARTITION OF src FOR VALUES FROM (400) TO (900)")
    db.execute("CREATE TABLE src_default PARTITION OF src DEFAULT")
    db.execute("""INSERT INTO src SELECT i, CASE WHEN i % 13 = 0 THEN NULL ELSE 18 + (i * 37) % 70 END,
                  (ARRAY['n', 's', 'e', NULL])[1 + i % 4],
                  ((i * 53) % 600) / 10.0, (ARRAY['flu', 'hiv', 'gout'])[1 + (i * 11) % 3]
                  FROM generate_series(1, 1500) i""")
    passed, one_pass, scans = one_pass_and_scans(db, schema, "src", "16kB", k=5)
    assert passed["regions"] > 4 and passed["region_pass"]["served"] is True
    assert len(one_pass) == 1500 and one_pass == scans
    db.execute("CREATE TABLE parent (id int, a int, b text, d float8, s text)")
    db.execute("CREATE TABLE child () INHERITS (parent)")
    db.execute("INSERT INTO parent SELECT * FROM src WHERE id % 2 = 0")
    db.execute("INSERT INTO child SELECT * FROM src WHERE id % 2 = 1")
    passed, one_pass, scans = one_pass_and_scans(db, schema, "parent", "16kB", k=5)
    assert passed["region_pass"]["served"] is True
    assert len(one_pass) == 1500 and one_pass == scans
    check_release(db, f"{release_schema_of(schema)}.one_pass", "parent", 5)


def test_texts_holding_the_readers_separator_are_read_in_one_pass_as_by_scans(db, schema):
    """A chunk whose texts hold the reader's separator (0x01) or its NULL stand-in (0x02) is
    read again by the pass with those texts as bytes: the regions get the same values."""
    synthetic(db, "src", 2000)
    db.execute(r"UPDATE src SET b = E'we\x01st' WHERE id % 97 = 0")
    db.execute(r"UPDATE src SET b = E'\x02' WHERE id % 89 = 0")
    db.execute(r"UPDATE src SET s = E'f\x02lu' WHERE id % 83 = 0")
    db.execute("SET plpy_anon.read_chunk_blocks = 2")
    try:
        passed, one_pass, scans = one_pass_and_scans(db, schema, "src", "8kB", k=5, l=2)
    finally:
        db.execute("RESET plpy_anon.read_chunk_blocks")
    assert passed["region_pass"]["served"] is True
    assert one_pass == scans
    rel = f"{release_schema_of(schema)}.one_pass"
    for column, value in [("b", r"E'we\x01st'"), ("b", r"E'\x02'"), ("s", r"E'f\x02lu'")]:
        test = f"{value} = ANY({column})" if column == "b" else f"{column} = {value}"
        released = db.execute(f"SELECT count(*) FROM {rel} WHERE {test}").fetchone()[0]
        held = db.execute(f"SELECT count(*) FROM src WHERE {column} = {value}").fetchone()[0]
        # a QI's value is in its class's set, which other rows share; a sensitive value is its row's
        assert held > 0 and (released >= held if column == "b" else released == held), column


class IntegerCuts:
    """What out_of_core.route_case asks of a Source, over the integer columns x0 and x1 (NULL
    lowest, as Source.left)."""

    def left(self, qi, value, strict):
        return f"(x{qi} IS NULL OR x{qi} {'<' if strict else '<='} {value})"

    def predicate(self, bounds):
        return " AND ".join(self.left(b.qi, b.value, b.strict) if b.left else
                            f"(NOT {self.left(b.qi, b.value, b.strict)})" for b in bounds) or "true"


@st.composite
def cut_trees(draw, bounds=(), depth=0):
    """The leaves (bounds from the root down) of a random tree of cuts on x0 and x1."""
    from plpy_anon.core.regions import Bound

    if depth >= 4 or (depth and draw(st.booleans())):
        return [tuple(bounds)]
    qi, value, strict = draw(st.integers(0, 1)), draw(st.integers(0, 12)), draw(st.booleans())
    return [leaf for left in (True, False)
            for leaf in draw(cut_trees(bounds + (Bound(qi, value, strict, left),), depth + 1))]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(leaves=cut_trees(), order=st.randoms(use_true_random=False), unordered=st.booleans())
def test_route_case_gives_each_row_the_one_region_whose_predicate_holds(db, leaves, order, unordered):
    """The pass's region label: a nested CASE over a tree's cuts, in any order of its leaves,
    and a CASE over the predicates where a region's bounds are not listed from the root down
    (one's bounds reversed): each row, NULLs too, gets the number of the region whose predicate
    holds, and exactly one holds."""
    from plpy_anon.core.regions import Region
    from plpy_anon.db.out_of_core import route_case

    order.shuffle(leaves)
    if unordered and any(len(b) > 1 for b in leaves):
        at = next(i for i, b in enumerate(leaves) if len(b) > 1)
        leaves[at] = tuple(reversed(leaves[at]))
    regions = [Region(bounds, 0) for bounds in leaves]
    cuts = IntegerCuts()
    route = route_case(cuts, regions)
    if not unordered:
        assert route.count("CASE") == len(regions) - 1        # one comparison per level
    held = " + ".join(f"({cuts.predicate(r.bounds)})::int" for r in regions)
    expected = "CASE " + " ".join(f"WHEN {cuts.predicate(r.bounds)} THEN {i}"
                                  for i, r in enumerate(regions)) + " END"
    wrong = db.execute(f"""
        SELECT count(*) FILTER (WHERE ({route}) IS DISTINCT FROM ({expected})),
               count(*) FILTER (WHERE {held} <> 1), count(*)
        FROM (SELECT nullif(i % 15, 14) AS x0, nullif((i * 7) % 16, 15) AS x1
              FROM generate_series(0, 239) i) AS pts""").fetchone()
    assert wrong == (0, 0, 240)


def test_refusal_raised_while_the_regions_are_fetched_keeps_its_sqlstate_and_hint(db, schema):
    """Out of core, a region is read and fitted when PostgreSQL fetches its slices, after the
    partitioning run returned: a refusal raised there (a text QI and a text sensitive column
    swapped by renaming since the release was made, which the region's read refuses) reaches
    the caller with its SQLSTATE, message and hint, and the release keeps its rows."""
    synthetic(db, "src", 2000)
    with budget(db, "8kB"):
        rel = release(db, schema, "src", "ooc", k=5)
        assert catalog(db, rel)[0]["out_of_core"]["regions"] > 1
        before = db.execute(f"SELECT count(*), count(DISTINCT s) FROM {rel}").fetchone()
        for statement in ("RENAME b TO tmp", "RENAME s TO b", "RENAME tmp TO s"):
            db.execute(f"ALTER TABLE src {statement}")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
            db.execute("SELECT anon.refresh(%s)", (rel,))
    assert "renamed" in refused.value.diag.message_primary
    assert refused.value.diag.message_hint.startswith("Rename them back")
    assert db.execute(f"SELECT count(*), count(DISTINCT s) FROM {rel}").fetchone() == before


def test_source_the_statistics_put_far_above_the_budget_is_not_counted_and_loses_no_row(
        db, schema):
    """A source whose planner estimate (its rows per page at the last ANALYZE times its pages
    now) is twice the budget or more goes out of core without a count(*) first; its regions are
    counted exactly, so every row is released, those added since the ANALYZE too."""
    synthetic(db, "src", 3000)
    db.execute("ANALYZE src")
    db.execute("INSERT INTO src SELECT i, 30, 'north', 1.5, 'flu' FROM generate_series(3001, 3400) i")
    with budget(db, "64kB"):          # 3,400 rows x 5 columns: ~500 kB estimated
        rel = release(db, schema, "src", "far", k=5, l=2)
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["rows_counted"] is False
    assert verified is True and row_count == 3400
    check_release(db, rel, "src", 5, 2)


def test_source_near_the_budget_is_counted_before_its_path_is_chosen(db, schema):
    """Within twice the budget the rows are counted: the estimate alone never decides it."""
    synthetic(db, "src", 3000)
    db.execute("ANALYZE src")
    with budget(db, "300kB"):         # ~450 kB estimated: over the budget, under twice it
        rel = release(db, schema, "src", "near", k=5, l=2)
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["rows_counted"] is True
    assert verified is True and row_count == 3000
    check_release(db, rel, "src", 5, 2)


def source_counts(plans: list[str]) -> list[str]:
    """auto_explain's plans of a count(*) of the source alone (not a grouped or filtered one)."""
    return [plan for plan in plans
            if re.search(r"^Query Text: SELECT count\(\*\) AS n FROM [^ ]*src$", plan, re.MULTILINE)]


def logged_plans(db) -> list[str]:
    """auto_explain's plans of every statement ``db`` runs from now on, nested ones too."""
    db.execute("LOAD 'auto_explain'")
    for setting, value in [("auto_explain.log_min_duration", "0"),
                           ("auto_explain.log_nested_statements", "on"),
                           ("auto_explain.log_level", "notice")]:
        db.execute("SELECT set_config(%s, %s, false)", (setting, value))
    return notices(db)


def test_source_near_the_budget_is_counted_by_its_categorical_orders_pass_alone(db, schema):
    """Over the budget by its estimate, within twice it, a source with a categorical QI cut at
    the top is counted by the pass that reads that QI's order (its rows per value add up to the
    table's), which the run needs anyway: no count(*) of the source first."""
    synthetic(db, "src", 3000)
    db.execute("ANALYZE src")
    seen = logged_plans(db)
    try:
        with budget(db, "300kB"):     # ~450 kB estimated: over the budget, under twice it
            rel = release(db, schema, "src", "near", k=5, l=2)
    finally:
        db.execute("RESET auto_explain.log_min_duration")
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["rows_counted"] is True
    assert any("GROUP BY b" in plan for plan in seen)            # the order's pass ran
    assert source_counts(seen) == []
    assert verified is True and row_count == 3000
    check_release(db, rel, "src", 5, 2)


def test_source_whose_stale_estimate_exceeds_the_budget_but_whose_rows_fit_is_fitted_in_memory(
        db, schema):
    """A third of the rows left since the ANALYZE (their pages kept): the estimate is over the
    budget, the rows its categorical QI's order counts fit it, and the in-memory run releases
    them, with the same classes as without a budget."""
    synthetic(db, "src", 3000)
    db.execute("ANALYZE src")
    db.execute("DELETE FROM src WHERE id % 3 <> 0")
    with budget(db, "300kB"):         # ~450 kB estimated, ~150 kB counted
        rel = release(db, schema, "src", "stale", k=5, l=2)
    unbounded = release(db, schema, "src", "unbounded", k=5, l=2)
    metrics, verified, row_count, _ = catalog(db, rel)
    assert "out_of_core" not in metrics
    assert verified is True and row_count == 1000
    check_release(db, rel, "src", 5, 2)
    classes = "SELECT array_agg(ROW(id, a, b, d)::text ORDER BY id) FROM {}"
    assert db.execute(classes.format(rel)).fetchone() == db.execute(classes.format(unbounded)).fetchone()


def test_release_within_the_budget_is_fitted_in_memory(db, schema):
    synthetic(db, "src", 500)
    rel = release(db, schema, "src", "mem", k=5)
    metrics, verified, _, _ = catalog(db, rel)
    assert "out_of_core" not in metrics and verified is True


def test_out_of_core_and_in_memory_releases_agree_in_rows_and_guarantees(db, schema):
    synthetic(db, "src", 3000)
    in_memory = release(db, schema, "src", "mem", k=10, l=2)
    with budget(db, "64kB"):
        out_of_core = release(db, schema, "src", "ooc", k=10, l=2)
    figures = {rel: catalog(db, rel) for rel in (in_memory, out_of_core)}
    assert "out_of_core" in figures[out_of_core][0] and "out_of_core" not in figures[in_memory][0]
    for rel in (in_memory, out_of_core):
        check_release(db, rel, "src", 10, 2)
        assert figures[rel][1] is True and figures[rel][2] == 3000
    ids = "SELECT array_agg(id ORDER BY id) FROM {}"
    assert db.execute(ids.format(in_memory)).fetchone() == db.execute(ids.format(out_of_core)).fetchone()
    ncp = [figures[rel][0]["ncp_percent"] for rel in (in_memory, out_of_core)]
    assert abs(ncp[1] - ncp[0]) <= 0.25 * ncp[0]          # close utility on a small table


def test_numeric_qi_holding_nulls_ranks_first_at_the_top_as_in_memory(db, schema):
    """The in-memory fit measures a partition holding NULL and values of a numeric QI at spread
    1, so it cuts that QI, and NULL apart, before the others: the top cuts rank it so too, and
    the release's NCP is the in-memory one's within 2 % (ranked by its values' range only, the
    NULLs of a would be scattered over the regions, every class holding one spread over all of
    a: +24.5 % on this table)."""
    synthetic(db, "src", 3000)                       # a is NULL in every 17th row
    in_memory = release(db, schema, "src", "mem", k=10, l=2)
    with budget(db, "64kB"):
        out_of_core = release(db, schema, "src", "ooc", k=10, l=2)
    check_release(db, out_of_core, "src", 10, 2)
    figures = {rel: catalog(db, rel)[0] for rel in (in_memory, out_of_core)}
    assert figures[out_of_core]["out_of_core"]["regions"] > 8
    ncp = [figures[rel]["ncp_per_attribute"]["a"] for rel in (in_memory, out_of_core)]
    assert abs(ncp[1] - ncp[0]) <= 0.02 * ncp[0]
    ncp = [figures[rel]["ncp_percent"] for rel in (in_memory, out_of_core)]
    assert abs(ncp[1] - ncp[0]) <= 0.02 * ncp[0]


#: a categorical QI's values and their rows, most frequent first: frequencies not in the type's
#: order (texts needing quotes, NULL among them)
BY_FREQUENCY = [("h,1", 800), ('a"q', 700), (None, 600), ("b\\x", 500), ("f", 400), ("c", 300),
                ("e", 200), ("d", 100)]
BY_FREQUENCY_VALUES = [v for v, n in BY_FREQUENCY for _ in range(n)]


def by_frequency_row(i: int) -> tuple:
    """Row ``i`` (id, b, s) of the table of BY_FREQUENCY's values, interleaved: every value
    throughout the table."""
    return i, BY_FREQUENCY_VALUES[(i * 7919) % len(BY_FREQUENCY_VALUES)], f"s{i % 3}"


def value_sets_in_memory_and_out_of_core(db, schema, table) -> tuple[dict, dict]:
    """({"mem", "ooc": release}, {"mem", "ooc": the released value sets of b}) of ``table``'s
    releases on b alone (k = 900) in memory and at an 8kB budget, each checked from its rows:
    verified, every row released, classes of 900 rows, each row's b in its class's set."""
    rels = {}
    for name, size in (("mem", None), ("ooc", "8kB")):
        with budget(db, size or "1GB"):
            rels[name] = db.execute(
                "SELECT anon.mondrian_view(%s, k => 900, quasi_identifiers => ARRAY['b'], "
                "sensitive => ARRAY['id', 's'], release_schema => %s, release_name => %s)",
                (table, release_schema_of(schema), name)).fetchone()[0]
    assert "out_of_core" in catalog(db, rels["ooc"])[0]
    groups = {}
    for name, rel in rels.items():
        assert catalog(db, rel)[1] is True
        assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == len(BY_FREQUENCY_VALUES)
        assert min(class_sizes(db, rel, ["b"])) >= 900
        assert db.execute(f"SELECT count(*) FROM {rel} r JOIN {table} t USING (id) "
                          f"WHERE array_position(r.b, t.b) IS NULL").fetchone()[0] == 0
        groups[name] = {frozenset(r[0]) for r in db.execute(f"SELECT DISTINCT b FROM {rel}")}
    return rels, groups


def test_categorical_top_cuts_group_its_values_as_the_in_memory_fit_does(db, schema):
    """The in-memory fit codes a categorical QI by frequency (most frequent first): out of core
    the top cuts and each region's codes follow the same order, not the type's, so a QI whose
    frequencies are not in its type's order (texts needing quotes, NULL among them) gives the
    same classes (cut in the type's order, the values would be grouped otherwise)."""
    db.execute("CREATE TABLE src (id int PRIMARY KEY, b text, s text)")
    with db.cursor().copy("COPY src FROM STDIN") as copy:
        for i in range(len(BY_FREQUENCY_VALUES)):
            copy.write_row(by_frequency_row(i))
    rels, groups = value_sets_in_memory_and_out_of_core(db, schema, "src")
    assert "out_of_core" not in catalog(db, rels["mem"])[0]
    assert groups["ooc"] == groups["mem"]
    assert {frozenset({"h,1", 'a"q'}), frozenset({"f", "c", "e", "d"})} <= groups["mem"]


def test_categorical_qi_above_order_values_is_cut_in_the_fit_order_when_the_budget_holds_it(
        db, schema):
    """A categorical QI of more distinct values than ORDER_VALUES is cut at the top, and coded
    in each region, in the in-memory fit's order (by frequency, ties by text) when the budget
    holds that order (out_of_core.order_values), what the order holds taken off the region
    budget (out_of_core.less_the_orders): every class, in memory as out of core, holds
    a run of consecutive values of that order (cut in the type's order at the top, a region's
    values interleave with the others' in it), and the NCP is the in-memory one's within 2 %."""
    n_values = 52_000                     # above ORDER_VALUES; frequencies not in text order
    db.execute("CREATE TABLE src (id int PRIMARY KEY, b text, s text)")
    db.execute(f"INSERT INTO src SELECT row_number() OVER (), 'v' || ((v * 7919) % {n_values}), "
               f"'s' || (v % 3) FROM generate_series(0, {n_values - 1}) v, "
               f"generate_series(1, 1 + v % 15) c")
    rels = {}
    # 27MB holds the order of 55,296 values; the table's estimate (33MB) does not fit
    for name, size in (("mem", "1GB"), ("ooc", "27MB")):
        with budget(db, size):
            rels[name] = db.execute(
                "SELECT anon.mondrian_view('src', k => 10, quasi_identifiers => ARRAY['b'], "
                "sensitive => ARRAY['s'], release_schema => %s, release_name => %s)",
                (release_schema_of(schema), name)).fetchone()[0]
    ooc = catalog(db, rels["ooc"])[0]["out_of_core"]
    # the order's values are held through the regions' fits: taken off the region budget (at
    # most half the budget: the backend's own memory is more than the 27MB)
    assert ooc["regions"] >= 2 and ooc["region_budget_bytes"] < (27 << 20) // 2
    assert "out_of_core" not in catalog(db, rels["mem"])[0]
    for rel in rels.values():
        assert catalog(db, rel)[1] is True            # verified from its rows: truthful sets
        assert catalog(db, rel)[2] == db.execute("SELECT count(*) FROM src").fetchone()[0]
        assert min(class_sizes(db, rel, ["b"])) >= 10
        broken = db.execute(f"""
            WITH f AS (SELECT b, row_number() OVER (ORDER BY count(*) DESC, b COLLATE "C") AS p
                       FROM src GROUP BY b)
            SELECT count(*) FROM (
                SELECT c.b FROM (SELECT DISTINCT b FROM {rel}) AS c
                CROSS JOIN LATERAL unnest(c.b) AS u(v) JOIN f ON f.b = u.v
                GROUP BY c.b HAVING max(f.p) - min(f.p) + 1 <> cardinality(c.b)) AS x""").fetchone()[0]
        assert broken == 0, rel
    ncp = [catalog(db, rels[name])[0]["ncp_percent"] for name in ("mem", "ooc")]
    assert abs(ncp[1] - ncp[0]) <= 0.02 * ncp[0]


def mean_width(db, rel, column):
    """The mean width of the released ranges of ``column`` over the released rows."""
    return float(db.execute(f"SELECT avg(upper({column}) - lower({column})) FROM {rel} "
                            f"WHERE {column} IS NOT NULL").fetchone()[0])


def test_prioritized_release_out_of_core_keeps_k_and_cuts_its_high_priority_column_finer(db, schema):
    """A prioritized release above the budget takes the out-of-core path with its own ranking at
    the top (and its own fit in each region): k, l and truthful ranges hold from the released
    rows, and the column of high priority is cut finer than plain Mondrian cuts it out of core."""
    synthetic(db, "src", 3000)
    with budget(db, "16kB"):
        plain = release(db, schema, "src", "plain", k=5, l=2)
        prioritized = release(db, schema, "src", "prio", k=5, l=2, priorities='{"d": 1}')
    metrics, verified, row_count, achieved_k = catalog(db, prioritized)
    assert metrics["out_of_core"]["regions"] > 4 and metrics["out_of_core"]["levels"][0]["cuts"] > 2
    assert verified is True and row_count == 3000 and achieved_k >= 5
    check_release(db, prioritized, "src", 5, 2)
    assert mean_width(db, prioritized, "d") < 0.5 * mean_width(db, plain, "d")
    assert mean_width(db, prioritized, "a") > mean_width(db, plain, "a")


def skewed(db, table, n):
    """``synthetic`` whose s is mostly 'flu' where a is low: cuts on a meet sides whose values
    are too uneven for entropy or recursive l."""
    synthetic(db, table, n)
    db.execute(f"UPDATE {table} SET s = CASE WHEN coalesce(a, 0) < 40 AND id % 10 < 8 THEN 'flu' "
               f"ELSE s END")


def worst_class_values(db, rel):
    """Per class of the released rows, its s values' counts (most frequent first): the entropy
    and recursive (c, l) figures are computed from them here."""
    rows = db.execute(f"""
        SELECT array_agg(n ORDER BY n DESC) FROM (
            SELECT {', '.join(QIS)}, s, count(*) AS n FROM {rel} WHERE s IS NOT NULL
            GROUP BY {', '.join(QIS)}, s) AS v GROUP BY {', '.join(QIS)}""").fetchall()
    return [r[0] for r in rows]


def assert_l_diversity_holds(db, rel, model: dict) -> None:
    """Every released class's values of s hold ``model``'s l-diversity at l = 2, computed from
    the released rows: entropy at least log 2, or recursive (c, 2): the most frequent value's
    rows below c times the others'."""
    for counts in worst_class_values(db, rel):
        total = sum(counts)
        if model.get("l_diversity") == "entropy":
            assert -sum(c / total * math.log(c / total) for c in counts) >= math.log(2) - 1e-9
        elif model.get("l_diversity") == "recursive":
            assert counts[0] < model["c"] * sum(counts[1:])


@pytest.mark.parametrize("model", [{"l_diversity": "entropy"}, {"l_diversity": "recursive", "c": 3}])
def test_entropy_and_recursive_l_out_of_core_hold_in_every_released_class(db, schema, model):
    skewed(db, "src", 3000)
    with budget(db, "16kB"):
        rel = release(db, schema, "src", "ooc", k=5, l=2, **model)
    metrics, verified, row_count, _ = catalog(db, rel)
    top = metrics["out_of_core"]["levels"][0]
    assert metrics["out_of_core"]["regions"] > 4 and top["cuts"] == metrics["out_of_core"]["regions"] - 1
    assert verified is True and row_count == 3000
    check_release(db, rel, "src", 5, 2)
    assert_l_diversity_holds(db, rel, model)


def test_regions_a_sample_leaves_too_large_under_entropy_l_are_cut_level_by_level(db, schema):
    """Rows in pairs of the same QIs, one 'flu' and one 'hiv': every cut's sides hold them half
    and half, entropy exactly ln 2, which a partial sample's sides miss by a row or more. The
    sample cuts little; what it leaves larger than the region budget is cut level by level on
    exact counts (every region then fits it: 24,000 rows of 5 columns, 152 bytes each, in a 1MB
    region budget need at least 4 regions), and entropy l holds in every released class."""
    db.execute("CREATE TABLE src (id int PRIMARY KEY, a int, b text, d float8, s text)")
    db.execute("""INSERT INTO src SELECT 2 * p + h, 18 + (p * 37) % 70,
                      (ARRAY['north', 'south', 'east', 'west'])[1 + (p * 7) % 4],
                      ((p * 53) % 600) / 10.0, (ARRAY['flu', 'hiv'])[1 + h]
                  FROM generate_series(1, 12000) p, generate_series(0, 1) h""")
    model = {"l": 2, "l_diversity": "entropy", "refresh_mode": "fresh"}
    with budget(db, "2MB"):
        rel = release_models(db, schema, "src", "ooc", 10, model)
    metrics, verified, row_count, _ = catalog(db, rel)
    ooc = metrics["out_of_core"]
    assert 1 << 19 < ooc["region_budget_bytes"] <= 1 << 20
    assert ooc["levels"][0]["sample"]["percent"] < 100
    assert len(ooc["levels"]) > 1 and ooc["regions"] >= 4
    assert verified is True and row_count == 24000
    assert min(class_sizes(db, rel, QIS)) >= 10
    assert_l_diversity_holds(db, rel, model)


def test_utility_split_out_of_core_keeps_k_and_l_and_its_utility_close_to_in_memory(db, schema):
    """The utility split's top cuts are chosen on the sample by its own rule (least spread of
    both sides summed over the QIs) and kept on exact counts; each region is fitted by it."""
    synthetic(db, "src", 3000)
    in_memory = release(db, schema, "src", "mem", k=5, l=2, split="utility")
    with budget(db, "16kB"):
        rel = release(db, schema, "src", "ooc", k=5, l=2, split="utility")
        median = release(db, schema, "src", "median", k=5, l=2)
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["regions"] > 4 and verified is True and row_count == 3000
    check_release(db, rel, "src", 5, 2)
    ncp = {r: catalog(db, r)[0]["ncp_percent"] for r in (in_memory, rel, median)}
    assert abs(ncp[rel] - ncp[in_memory]) <= 0.25 * ncp[in_memory]
    assert ncp[rel] != ncp[median]          # not the median rule's release


def worst_equal_emd(db, rel):
    """The largest EMD (equal ground distance: half the summed differences of the
    distributions) of a released class's s to the released rows', from the released rows."""
    return db.execute(f"""
        WITH t AS (SELECT s, count(*)::float8 / sum(count(*)) OVER () AS q FROM {rel}
                   WHERE s IS NOT NULL GROUP BY s),
             c AS (SELECT {', '.join(QIS)}, s, count(*)::float8 / sum(count(*)) OVER
                          (PARTITION BY {', '.join(QIS)}) AS p
                   FROM {rel} WHERE s IS NOT NULL GROUP BY {', '.join(QIS)}, s),
             classes AS (SELECT DISTINCT {', '.join(QIS)} FROM c)
        SELECT max(emd) FROM (
            SELECT 0.5 * sum(abs(coalesce(c.p, 0) - t.q)) AS emd
            FROM classes k CROSS JOIN t
            LEFT JOIN c ON c.s = t.s AND c.a IS NOT DISTINCT FROM k.a
                       AND c.b IS NOT DISTINCT FROM k.b AND c.d IS NOT DISTINCT FROM k.d
            GROUP BY k.a, k.b, k.d) AS e""").fetchone()[0]


def test_t_closeness_out_of_core_holds_in_every_released_class(db, schema):
    """With t (a categorical sensitive column), each top cut is kept only where both sides are
    within t of the table by exact counts, and each region is fitted within t - EMD(region,
    table) of itself: every released class is within t of the table, computed here from the
    released rows (equal ground distance: half the summed differences of the distributions)."""
    skewed(db, "src", 3000)
    with budget(db, "16kB"):
        rel = db.execute("SELECT anon.mondrian_view('src', quasi_identifiers => %s, k => 5, "
                         "t => 0.2, sensitive => ARRAY['s'], release_schema => %s, "
                         "release_name => 'ooc')", (QIS, release_schema_of(schema))).fetchone()[0]
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["regions"] > 4 and verified is True and row_count == 3000
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 3000
    assert min(class_sizes(db, rel, QIS)) >= 5
    assert worst_equal_emd(db, rel) <= 0.2 + 1e-9


def numeric_sensitive(db, table, n):
    """``synthetic`` with a numeric sensitive column ``w`` (some NULL) whose values are low where
    a is low: cuts on a meet sides far from the table's distribution."""
    synthetic(db, table, n)
    db.execute(f"ALTER TABLE {table} ADD COLUMN w int")
    db.execute(f"UPDATE {table} SET w = CASE WHEN id % 23 = 0 THEN NULL "
               f"WHEN coalesce(a, 0) < 40 THEN (id * 7) % 25 ELSE 10 + (id * 13) % 40 END")


def worst_ordered_emd(db, rel, column):
    """The largest ordered-distance EMD between a released class's distribution of ``column``
    and the released rows' (its m distinct values 1/(m - 1) apart, NULLs left out), computed
    here from the released rows."""
    rows = db.execute(f"SELECT {', '.join(f'{q}::text' for q in QIS)}, {column}, count(*) "
                      f"FROM {rel} WHERE {column} IS NOT NULL "
                      f"GROUP BY {', '.join(QIS)}, {column}").fetchall()
    values = sorted({r[3] for r in rows})
    if len(values) < 2:
        return 0.0
    where = {v: i for i, v in enumerate(values)}
    table, classes = [0] * len(values), {}
    for *key, value, n in rows:
        table[where[value]] += n
        classes.setdefault(tuple(key), [0] * len(values))[where[value]] += n
    worst = 0.0
    for counts in classes.values():
        gap, emd = 0.0, 0.0
        for p, q in zip(counts[:-1], table[:-1]):
            gap += p / sum(counts) - q / sum(table)
            emd += abs(gap)
        worst = max(worst, emd / (len(values) - 1))
    return worst


def release_t(db, schema, table, name, t, k=5, sensitive="w"):
    return db.execute("SELECT anon.mondrian_view(%s, quasi_identifiers => %s, k => %s, t => %s, "
                      "sensitive => ARRAY[%s], release_schema => %s, release_name => %s)",
                      (table, QIS, k, t, sensitive, release_schema_of(schema), name)).fetchone()[0]


def test_t_closeness_of_a_numeric_column_out_of_core_holds_in_every_released_class(db, schema):
    """With t of a numeric sensitive column (the ordered distance), the top is cut on exact
    counts per value and each region fitted within the room its distance to the table leaves,
    scaled from the table's values to the region's: every released class is within t of the
    table by the ordered distance computed here from the released rows."""
    numeric_sensitive(db, "src", 3000)
    with budget(db, "16kB"):
        rel = release_t(db, schema, "src", "ooc", 0.2)
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["regions"] > 4 and verified is True and row_count == 3000
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 3000
    assert min(class_sizes(db, rel, QIS)) >= 5
    assert worst_ordered_emd(db, rel, "w") <= 0.2 + 1e-9
    assert verification(db, rel)["models"]["by_column"]["w"]["failing_classes"] == 0


@pytest.mark.parametrize("model", [{"l": 2, "l_diversity": "entropy"}, {"t": 0.3}])
def test_check_of_out_of_core_release_with_models_runs_within_its_budget_and_refuses_a_tampered_one(
        db, schema, model):
    """The check of a release promising entropy l or t counts its classes a fetch at a time
    with the pass bounded by plpy_anon.build_memory, each class decided from its own counts:
    its figures are those computed here from the released rows, and a run whose classes were
    split in two is refused for the model as well as for k."""
    skewed(db, "src", 3000)

    def build(name):
        if "t" in model:
            return release_t(db, schema, "src", name, model["t"], k=3, sensitive="s")
        return release(db, schema, "src", name, k=3, **model)
    with budget(db, "256kB"):
        rel = build("ooc")
    figures = verification(db, rel)
    capped = figures["counted_with"]
    work_mem = db.execute("SELECT pg_size_bytes(%s)", (capped["work_mem"],)).fetchone()[0]
    assert work_mem * float(capped["hash_mem_multiplier"]) <= 256 * 1024 // 4
    assert "out_of_core" in catalog(db, rel)[0] and catalog(db, rel)[0]["n_classes"] > 50
    by_column = figures["models"]["by_column"]
    assert by_column["s"]["failing_classes"] == 0
    assert by_column["s"]["min_distinct"] == min(distinct_sensitive_per_class(db, rel, QIS, "s"))
    least = min(-sum(c / sum(counts) * math.log(c / sum(counts)) for c in counts)
                for counts in worst_class_values(db, rel))
    assert by_column["s"]["min_entropy"] == pytest.approx(least, abs=1e-6)
    with budget(db, "256kB"), mondrian_tampered(db, SPLIT_BELOW_K), \
            pytest.raises(psycopg.errors.DataException) as failed:
        build("tampered")
    assert "fail the privacy model asked" in failed.value.diag.message_primary
    detail = json.loads(failed.value.diag.message_detail.removeprefix("figures: "))
    assert detail["counted_with"] == capped


@pytest.mark.slow                                  # two builds of 24,000 rows at a 2MB budget: ~20 s
def test_top_cuts_from_a_partial_sample_keep_k_and_l_and_a_rebuild_gives_the_same_release(db, schema):
    """Above the sample's size the top cuts are chosen on a seeded sample of part of the rows:
    the guarantees still hold from the released rows (each cut was kept on exact counts), and
    building the same table again samples the same rows, so it releases the same classes."""
    synthetic(db, "src", 24000)
    with budget(db, "2MB"):
        first = release(db, schema, "src", "first", k=5, l=2)
        second = release(db, schema, "src", "second", k=5, l=2)
    metrics = catalog(db, first)[0]["out_of_core"]
    sample = metrics["levels"][0]["sample"]
    assert 50 < sample.pop("percent") < 90 and sample["rows"] < 24000 and metrics["regions"] >= 4
    again = catalog(db, second)[0]["out_of_core"]["levels"][0]["sample"]
    assert {**again, "seconds": None, "percent": None} == {**sample, "seconds": None, "percent": None}
    check_release(db, first, "src", 5, 2)
    rows = "SELECT array_agg(ROW(id, a, b, d)::text ORDER BY id) FROM {}"
    assert db.execute(rows.format(first)).fetchone() == db.execute(rows.format(second)).fetchone()


def test_rebuild_samples_the_same_rows_whatever_the_statistics_say(db, schema):
    """Built without a count (its estimate twice the budget or more), a release samples at the
    rate of the exact rows (a categorical QI's rows per value add up to them), never at the
    planner's: with the statistics off by half, a rebuild of the unchanged table samples the
    same rows and releases the same classes."""
    synthetic(db, "src", 24000)
    db.execute("ANALYZE src")
    with budget(db, "1MB"):           # 24,000 rows x 5 columns: ~3.6 MB estimated
        first = release(db, schema, "src", "first", k=5, l=2)
        db.execute("UPDATE pg_catalog.pg_class SET reltuples = reltuples * 1.5 "
                   "WHERE oid = 'src'::regclass")
        second = release(db, schema, "src", "second", k=5, l=2)
    before, after = (catalog(db, rel)[0]["out_of_core"] for rel in (first, second))
    assert before["rows_counted"] is False and after["rows_counted"] is False
    assert before["estimated_bytes"] < after["estimated_bytes"]
    sample = before["levels"][0]["sample"]
    assert 50 < sample["percent"] < 90 and before["regions"] >= 4
    assert {**after["levels"][0]["sample"], "seconds": None} == {**sample, "seconds": None}
    check_release(db, second, "src", 5, 2)
    rows = "SELECT array_agg(ROW(id, a, b, d)::text ORDER BY id) FROM {}"
    assert db.execute(rows.format(first)).fetchone() == db.execute(rows.format(second)).fetchone()


@pytest.mark.slow                                  # a build and a refresh of 20,000 rows at 2MB: ~20 s
def test_write_of_a_release_above_the_budget_runs_with_work_mem_capped_by_the_budget(db, schema):
    """The run's rows (materialized, sorted into release order) are held by PostgreSQL while the
    regions are fitted: the build's query runs with work_mem at a sixteenth of the budget, as
    read inside that query, and the release keeps its guarantees."""
    synthetic(db, "src", 20000)
    with budget(db, "2MB"):
        rel = release(db, schema, "src", "ooc", k=5)
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["write_work_mem"] == "128kB"
    assert verified is True and row_count == 20000
    check_release(db, rel, "src", 5)
    db.execute("INSERT INTO src SELECT i, 18 + i % 70, 'east', i % 600 / 10.0, 'flu' "
               "FROM generate_series(20001, 22000) i")
    with budget(db, "2MB"):                 # a refresh is built within the budget as well
        assert db.execute("SELECT row_count FROM anon.refresh(%s)", (rel,)).fetchone()[0] == 22000
    metrics, verified, _, _ = catalog(db, rel)
    assert metrics["out_of_core"]["write_work_mem"] == "128kB" and verified is True
    check_release(db, rel, "src", 5)


def verification(db, rel):
    row = db.execute("SELECT verification FROM anon.releases "
                     "WHERE format('%%I.%%I', release_schema, release_name) = %s", (rel,)).fetchone()
    return row[0] if isinstance(row[0], dict) else json.loads(row[0])


def test_check_of_an_out_of_core_release_runs_within_its_budget_and_refuses_a_tampered_one(db, schema):
    """The check's grouping of the released rows runs with work_mem and hash memory capped by
    plpy_anon.build_memory (the settings read inside the check), and still counts every class:
    a run whose classes were split below k is refused."""
    synthetic(db, "src", 6000)
    in_memory = release(db, schema, "src", "mem", k=5)
    with budget(db, "512kB"):
        rel = release(db, schema, "src", "ooc", k=5)
    assert "out_of_core" in catalog(db, rel)[0]
    capped, uncapped = verification(db, rel)["counted_with"], verification(db, in_memory)["counted_with"]
    size = "SELECT pg_size_bytes(%s)"
    work_mem = db.execute(size, (capped["work_mem"],)).fetchone()[0]
    assert work_mem * float(capped["hash_mem_multiplier"]) <= 512 * 1024 // 4
    assert db.execute(size, (uncapped["work_mem"],)).fetchone()[0] > work_mem
    assert float(uncapped["hash_mem_multiplier"]) > float(capped["hash_mem_multiplier"])
    check_release(db, rel, "src", 5)
    with budget(db, "512kB"), mondrian_tampered(db, SPLIT_BELOW_K), \
            pytest.raises(psycopg.errors.DataException) as failed:
        release(db, schema, "src", "tampered", k=5)
    assert "k = 5 promised" in failed.value.diag.message_primary
    figures = json.loads(failed.value.diag.message_detail.removeprefix("figures: "))
    assert figures["counted_with"] == capped


def test_bounded_check_gives_the_figures_and_report_of_a_check_holding_every_class(db, schema):
    """The check of an out-of-core release counts its classes a fetch at a time and keeps only
    figures (no class x value table): its l per column and its stored risk report are those
    counted from the same released rows by the unbounded report and by SQL, NULLs left out."""
    synthetic(db, "src", 6000)
    db.execute("UPDATE src SET s = NULL WHERE id % 13 = 0")
    with budget(db, "512kB"):
        rel = release(db, schema, "src", "ooc", k=3, l=2)
    metrics, verified, _, _ = catalog(db, rel)
    assert "out_of_core" in metrics and verified is True
    assert metrics["n_classes"] > 1000        # several fetches of classes
    stored = db.execute("SELECT risk FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                        "release_name) = %s", (rel,)).fetchone()[0]
    fresh = db.execute("SELECT json_agg(r) FROM anon.risk_report(%s) AS r", (rel,)).fetchone()[0]
    key = ("measure", "column_name")
    by = {tuple(r[x] for x in key): r["value"] for r in fresh}
    assert {tuple(r[x] for x in key): r["value"] for r in stored} == by
    assert by[("t_closeness", "s")] > 0 and by[("entropy_l", "id")] > 1
    assert verification(db, rel)["l_by_column"] == {
        c: min(distinct_sensitive_per_class(db, rel, QIS, c)) for c in ("id", "s")}


def test_budget_that_is_not_a_size_is_refused(db, schema):
    synthetic(db, "src", 100)
    with budget(db, "lots"), pytest.raises(psycopg.errors.InvalidParameterValue) as error:
        release(db, schema, "src", "bad", k=5)
    assert "plpy_anon.build_memory" in error.value.diag.message_primary
    assert error.value.diag.message_hint


row_strategy = st.tuples(st.one_of(st.none(), st.integers(0, 12)),
                         st.sampled_from(["a", "b", "b", "b", "c", None]),
                         st.one_of(st.none(), st.floats(-5, 5, allow_nan=False, width=32)),
                         st.sampled_from(["x", "y", "z", None]))
rows_strategy = st.lists(row_strategy, min_size=2, max_size=120)


#: the two paths every random table is released by: in memory (the default budget) and out of
#: core at one byte (every region of 2k rows or more is cut)
PATHS = [("in_memory", None), ("out_of_core", "1")]


def released_by_both_paths(db, schema, kwargs, refusals) -> dict:
    """``r`` released by each of :data:`PATHS` with ``kwargs``: each path's release checked from
    its rows (every row once, inside its class's ranges and sets, classes of k, l values of s),
    or the SQLSTATE of its refusal (one of ``refusals``): ``{path: (released relation or None,
    SQLSTATE or None)}``, the same outcome by both paths."""
    outcomes = {}
    for path, size in PATHS:
        try:
            with budget(db, size) if size else contextlib.nullcontext():
                rel = release(db, schema, "r", f"r_{path}", **kwargs)
        except refusals as refused:
            outcomes[path] = (None, refused.sqlstate)
            continue
        metrics, verified, _, _ = catalog(db, rel)
        assert ("out_of_core" in metrics) == (size is not None) and verified is True
        check_release(db, rel, "r", kwargs["k"], kwargs.get("l"))
        outcomes[path] = (rel, None)
    assert outcomes["in_memory"][1] == outcomes["out_of_core"][1], outcomes
    event(f"refused ({outcomes['in_memory'][1]})" if outcomes["in_memory"][1] else "released")
    return outcomes


def random_table(db, schema, rows):
    db.execute("DROP TABLE IF EXISTS r CASCADE")
    db.execute("DELETE FROM anon.releases WHERE release_schema = %s", (release_schema_of(schema),))
    load(db, "r", rows)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_strategy, k=st.integers(2, 8), l=st.sampled_from([None, 2]),
       priorities=st.sampled_from([None, '{"b": 1}', '{"a": 1, "d": 0.5}']))
def test_random_tables_released_in_memory_and_out_of_core_are_k_anonymous_truthful_and_complete(
        db, schema, rows, k, l, priorities):
    """The same random table (NULLs in every QI, the categorical b among them), plain or
    prioritized, released in memory and out of core: both released, each k-anonymous, truthful
    and complete from its rows, or both refused (only l-diversity may be impossible)."""
    k = min(k, len(rows))
    random_table(db, schema, rows)
    if l and len({row[3] for row in rows} - {None}) < l:
        l = None
    kwargs = {"k": k, **({"l": l} if l else {}), **({"priorities": priorities} if priorities else {})}
    outcomes = released_by_both_paths(db, schema, kwargs, psycopg.errors.DataException)
    if outcomes["in_memory"][1] is not None:
        assert l is not None


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(row_strategy, min_size=40, max_size=160), k=st.integers(2, 6),
       model=st.sampled_from(["entropy", "recursive"]),
       priorities=st.sampled_from([None, '{"a": 1}', '{"b": 1, "d": 0.5}']))
def test_random_tables_released_in_memory_and_out_of_core_with_priorities_or_entropy_l_keep_them(
        db, schema, rows, k, model, priorities):
    """Prioritized releases and entropy / recursive l-diversity, in memory and out of core: from
    each one's released rows, every class keeps k and its model, and every row is in its ranges;
    a table that fails the model as a whole is refused by both."""
    k = min(k, len(rows))
    random_table(db, schema, rows)
    kwargs = {"k": k, "l": 2, "l_diversity": model, **({"c": 2} if model == "recursive" else {}),
              **({"priorities": priorities} if priorities else {})}
    outcomes = released_by_both_paths(
        db, schema, kwargs, (psycopg.errors.DataException, psycopg.errors.InvalidParameterValue))
    for rel in [rel for rel, _ in outcomes.values() if rel is not None]:
        for counts in worst_class_values(db, rel):
            total = sum(counts)
            if model == "entropy":
                assert -sum(c / total * math.log(c / total) for c in counts) >= math.log(2) - 1e-9
            else:
                assert counts[0] < 2 * sum(counts[1:])


numeric_row_strategy = st.tuples(st.one_of(st.none(), st.integers(0, 12)),
                                 st.sampled_from(["a", "b", "b", "c", None]),
                                 st.one_of(st.none(), st.floats(-5, 5, allow_nan=False, width=32)),
                                 st.one_of(st.none(), st.integers(0, 9), st.integers(0, 400)))


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(numeric_row_strategy, min_size=30, max_size=100), k=st.integers(2, 6),
       t=st.sampled_from([0.15, 0.3, 0.6]))
def test_random_tables_released_out_of_core_with_t_of_a_numeric_column_keep_it(
        db, schema, rows, k, t):
    """t-closeness of a numeric sensitive column out of core, at a one-byte budget: from the
    released rows, every class keeps k and is within t of the table by the ordered distance,
    and every row is released."""
    db.execute("DROP TABLE IF EXISTS r CASCADE")
    db.execute("DELETE FROM anon.releases WHERE release_schema = %s", (release_schema_of(schema),))
    db.execute("CREATE TABLE r (id int PRIMARY KEY, a int, b text, d float8, w int)")
    with db.cursor().copy("COPY r FROM STDIN") as copy:
        for i, row in enumerate(rows):
            copy.write_row((i, *row))
    if all(row[3] is None for row in rows):
        return                                   # no value: refused for t (the table's own)
    with budget(db, "1"):
        rel = release_t(db, schema, "r", "r_ooc", t, k=min(k, len(rows)))
    metrics, verified, _, _ = catalog(db, rel)
    assert "out_of_core" in metrics and verified is True
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == len(rows)
    assert min(class_sizes(db, rel, QIS)) >= min(k, len(rows))
    assert worst_ordered_emd(db, rel, "w") <= t + 1e-9


# ------------------------------------------------------- a source sharded over two other servers

@pytest.fixture(scope="module")
def shards():
    """Two throwaway clusters of this machine's PostgreSQL, each holding half of a table."""
    with ThrowawayCluster() as s0, ThrowawayCluster() as s1:
        yield [s0, s1]


@contextlib.contextmanager
def sharded_table(db, schema, shards, columns: str, fill):
    """``src`` (``columns``) partitioned by ``id % 2`` into two postgres_fdw foreign tables, one
    per shard, owned with their servers by the role that releases it; ``fill(conn, i)`` writes
    shard i's rows into its table ``part``."""
    servers = [f"{schema}_shard{i}" for i in range(2)]
    db.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    db.execute(f"CREATE TABLE src ({columns}) PARTITION BY LIST ((id % 2))")
    try:
        for i, (shard, server) in enumerate(zip(shards, servers)):
            with psycopg.connect(shard.dsn(), autocommit=True) as conn:
                conn.execute("DROP TABLE IF EXISTS part")
                conn.execute(f"CREATE TABLE part ({columns}, PRIMARY KEY (id))")
                fill(conn, i)
            db.execute(f"CREATE SERVER {server} FOREIGN DATA WRAPPER postgres_fdw "
                       f"OPTIONS (host '{shard.socket_dir}', dbname 'postgres')")
            db.execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {server} OPTIONS (user 'postgres')")
            db.execute(f"CREATE FOREIGN TABLE src_{i} PARTITION OF src FOR VALUES IN ({i}) "
                       f"SERVER {server} OPTIONS (schema_name 'public', table_name 'part')")
        yield "src"
    finally:
        db.execute("DROP TABLE IF EXISTS src CASCADE")
        for server in servers:
            db.execute(f"DROP SERVER IF EXISTS {server} CASCADE")


def synthetic_shard(conn, i):
    """Shard i's rows of ``synthetic``'s 3,000 (those of ``id % 2 = i``)."""
    conn.execute(f"""INSERT INTO part
        SELECT i, CASE WHEN i % 17 = 0 THEN NULL ELSE 18 + (i * 37) % 70 END,
               (ARRAY['north', 'south', 'east', 'west', NULL])[1 + (i * 7) % 5],
               ((i * 53) % 600) / 10.0, (ARRAY['flu', 'hiv', 'cancer', 'asthma'])[1 + (i * 11) % 4]
        FROM generate_series(1, 3000) i WHERE i % 2 = {i}""")


@pytest.fixture
def sharded(db, schema, shards):
    """``src``: ``synthetic``'s 3,000 rows over two shards (:func:`sharded_table`)."""
    with sharded_table(db, schema, shards, "id int, a int, b text, d float8, s text",
                       synthetic_shard) as table:
        yield table


@contextlib.contextmanager
def remote_plans(db):
    """The Remote SQL lines of the plans of every statement run meanwhile (auto_explain,
    verbose: the query postgres_fdw sent to a shard), a live list."""
    db.execute("LOAD 'auto_explain'")
    seen = notices(db)
    for setting, value in [("auto_explain.log_min_duration", "0"), ("auto_explain.log_verbose", "on"),
                           ("auto_explain.log_nested_statements", "on"), ("auto_explain.log_level", "notice")]:
        db.execute("SELECT set_config(%s, %s, false)", (setting, value))
    remote: list[str] = []
    try:
        yield remote
    finally:
        db.execute("RESET auto_explain.log_min_duration")
        remote.extend(line.strip() for plan in seen for line in plan.splitlines()
                      if "Remote SQL:" in line)


def test_source_sharded_through_postgres_fdw_is_released_with_its_aggregates_run_on_the_shards(
        db, schema, sharded):
    with remote_plans(db) as remote, budget(db, "64kB"):
        rel = release(db, schema, sharded, "ooc", k=5, l=2)
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["regions"] > 2 and verified is True and row_count == 3000
    # each region read by its predicate, pushed down to the shards: no pass pulls every row here
    assert "region_pass" not in metrics["out_of_core"]
    check_release(db, rel, sharded, 5, 2)
    # the level queries' aggregates ran where the rows are, one remote query per shard
    assert any("count(" in line and "GROUP BY" in line for line in remote), remote[:5]


def release_models(db, schema, table, name, k, model: dict):
    """A release of ``table`` with ``model``'s arguments (sensitive ``id`` and ``s`` unless it
    says, ``s`` alone with t)."""
    model = {"sensitive": ["s"] if "t" in model else ["id", "s"], **model}
    args = "".join(f", {key} => %({key})s" for key in model)
    return db.execute(f"SELECT anon.mondrian_view(%(tbl)s, quasi_identifiers => %(q)s, k => %(k)s, "
                      f"release_schema => %(rs)s, release_name => %(n)s{args})",
                      {"tbl": table, "q": QIS, "k": k, "rs": release_schema_of(schema), "n": name,
                       **model}).fetchone()[0]


def skewed_shard(conn, i):
    """Shard i's rows of ``skewed``'s 3,000."""
    synthetic_shard(conn, i)
    conn.execute("UPDATE part SET s = CASE WHEN coalesce(a, 0) < 40 AND id % 10 < 8 THEN 'flu' "
                 "ELSE s END")


@pytest.mark.parametrize("model", [{"l": 2, "l_diversity": "entropy"},
                                   {"l": 2, "l_diversity": "recursive", "c": 3}, {"t": 0.2}])
def test_models_of_a_sharded_source_hold_in_every_class_counted_on_the_shards(db, schema, shards, model):
    """Entropy and recursive (c, l)-diversity and t-closeness of a source sharded through
    postgres_fdw are released out of core: each level's cut is kept only where both sides' rows
    per sensitive value, counted on the shards (grouped by region and value) and summed, hold
    the model, and with t each region is fitted within the room its distance to the table
    leaves. Every released class holds the model, computed here from the released rows."""
    with sharded_table(db, schema, shards, "id int, a int, b text, d float8, s text",
                       skewed_shard) as table, remote_plans(db) as remote, budget(db, "64kB"):
        rel = release_models(db, schema, table, "ooc", 5, {**model, "sensitive": ["s"]})
        metrics, verified, row_count, _ = catalog(db, rel)
        assert metrics["out_of_core"]["regions"] > 2 and verified is True and row_count == 3000
        assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 3000
        assert min(class_sizes(db, rel, QIS)) >= 5
        if "t" in model:
            assert worst_equal_emd(db, rel) <= 0.2 + 1e-9
        else:
            assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= 2
        assert_l_diversity_holds(db, rel, model)
    # the sides' rows per value were counted on the shards: grouped by region and value there
    assert any("FILTER" in line and "GROUP BY 1, 2" in line for line in remote), remote[:5]


def numeric_shard(conn, i):
    """Shard i's rows of ``numeric_sensitive``'s 3,000."""
    synthetic_shard(conn, i)
    conn.execute("UPDATE part SET w = CASE WHEN id % 23 = 0 THEN NULL WHEN coalesce(a, 0) < 40 "
                 "THEN (id * 7) % 25 ELSE 10 + (id * 13) % 40 END")


def test_t_of_a_numeric_column_of_a_sharded_source_holds_in_every_released_class(db, schema, shards):
    """t-closeness of a numeric sensitive column of a sharded source, out of core: the shards'
    values are numbered in value order on the coordinator (the ordered distance's), and every
    released class is within t of the released rows by the ordered distance."""
    with sharded_table(db, schema, shards, "id int, a int, b text, d float8, s text, w int",
                       numeric_shard) as table, budget(db, "64kB"):
        rel = release_t(db, schema, table, "ooc", 0.2)
        metrics, verified, row_count, _ = catalog(db, rel)
        assert metrics["out_of_core"]["regions"] > 2 and verified is True and row_count == 3000
        assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 3000
        assert min(class_sizes(db, rel, QIS)) >= 5
        assert worst_ordered_emd(db, rel, "w") <= 0.2 + 1e-9


def test_utility_split_of_a_sharded_source_is_released_out_of_core_close_to_in_memory(db, schema, sharded):
    """A utility-split release of a sharded source is cut at the top by the median rule on the
    shards' exact counts and each region fitted by the utility split."""
    in_memory = release(db, schema, sharded, "mem", k=5, l=2, split="utility")
    with budget(db, "64kB"):
        rel = release(db, schema, sharded, "ooc", k=5, l=2, split="utility")
    metrics, verified, row_count, _ = catalog(db, rel)
    assert metrics["out_of_core"]["regions"] > 2 and verified is True and row_count == 3000
    check_release(db, rel, sharded, 5, 2)
    ncp = [catalog(db, r)[0]["ncp_percent"] for r in (in_memory, rel)]
    assert abs(ncp[1] - ncp[0]) <= 0.25 * ncp[0]


def test_categorical_cuts_of_a_sharded_source_group_its_values_as_the_in_memory_fit_does(
        db, schema, shards):
    """Level by level (a sharded source, which cannot be sampled), a categorical QI is cut in
    the in-memory fit's order (most frequent first, the shards' counts per value summed), not
    its type's: the same classes as the in-memory release."""
    def fill(conn, shard):
        with conn.cursor().copy("COPY part FROM STDIN") as copy:
            for i in range(shard, len(BY_FREQUENCY_VALUES), 2):
                copy.write_row(by_frequency_row(i))

    with sharded_table(db, schema, shards, "id int, b text, s text", fill) as table:
        _, groups = value_sets_in_memory_and_out_of_core(db, schema, table)
    assert groups["ooc"] == groups["mem"]
    assert {frozenset({"h,1", 'a"q'}), frozenset({"f", "c", "e", "d"})} <= groups["mem"]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(row_strategy, min_size=40, max_size=160), k=st.integers(2, 6),
       model=st.sampled_from([{"l": 2, "l_diversity": "entropy"},
                              {"l": 2, "l_diversity": "recursive", "c": 2}, {"t": 0.3}]))
def test_random_sharded_tables_released_out_of_core_with_models_keep_them(
        db, schema, shards, rows, k, model):
    """Entropy, recursive l and t-closeness of random tables sharded over two servers, at a
    one-byte budget: from the released rows, every row is in its class's ranges, every class
    keeps k and its model."""
    k = min(k, len(rows))
    db.execute("DELETE FROM anon.releases WHERE release_schema = %s", (release_schema_of(schema),))

    def fill(conn, shard):
        with conn.cursor().copy("COPY part FROM STDIN") as copy:
            for i, row in enumerate(rows):
                if i % 2 == shard:
                    copy.write_row((i, *row))

    with sharded_table(db, schema, shards, "id int, a int, b text, d float8, s text", fill) as table:
        try:
            with budget(db, "1"):
                rel = release_models(db, schema, table, "r_ooc", k, model)
        except (psycopg.errors.DataException, psycopg.errors.InvalidParameterValue):
            return                                  # the whole table fails the model: refused
        metrics, verified, _, _ = catalog(db, rel)
        assert "out_of_core" in metrics and verified is True
        if "t" in model:                            # t of s alone: id is not released
            assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == len(rows)
            assert min(class_sizes(db, rel, QIS)) >= k
            assert worst_equal_emd(db, rel) <= 0.3 + 1e-9
        else:
            check_release(db, rel, table, k, 2)
        assert_l_diversity_holds(db, rel, model)


def test_foreign_partition_on_a_server_another_role_owns_is_refused(db, schema):
    """Foreign members are read only when the caller owns them and their servers (what it owns,
    it chose): a server another role owns decides where the caller's user mapping logs in."""
    role = f"{schema}_server_owner"[:63]
    db.execute("CREATE EXTENSION IF NOT EXISTS file_fdw")
    db.execute(f"CREATE ROLE {role}")
    db.execute(f"CREATE SERVER {role}_files FOREIGN DATA WRAPPER file_fdw")
    try:
        db.execute("CREATE TABLE src (id int, a int, b text, d float8, s text) PARTITION BY RANGE (id)")
        db.execute("CREATE TABLE src_1 PARTITION OF src FOR VALUES FROM (1) TO (100)")
        db.execute(f"CREATE FOREIGN TABLE src_f PARTITION OF src FOR VALUES FROM (100) TO (200) "
                   f"SERVER {role}_files OPTIONS (filename '/dev/null')")
        db.execute("INSERT INTO src_1 SELECT i, i % 50, 'x', i, 'flu' FROM generate_series(1, 99) i")
        release(db, schema, "src", "owned", k=5)            # the caller owns table and server
        db.execute(f"ALTER SERVER {role}_files OWNER TO {role}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="foreign partitions"):
            release(db, schema, "src", "not_owned", k=5)
    finally:
        db.execute("DROP TABLE IF EXISTS src CASCADE")
        db.execute(f"DROP SERVER IF EXISTS {role}_files CASCADE")
        db.execute(f"DROP ROLE IF EXISTS {role}")


EXTREME_VALUES = {
    "int2": ["-32768", "32767", "0", "-1"],
    "int4": ["-2147483648", "2147483647", "7"],
    "int8": ["-9223372036854775808", "9223372036854775807", "3"],
    "numeric": ["'NaN'", "1e400", "-1e400", "1e-400", "-1e-400", "0", "2.5", "1e308", "-1e308"],
    "float4": ["'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "1.5"],
    "float8": ["'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "0", "1e-320"],
    "date": ["'infinity'", "'-infinity'", "'2000-01-01'", "'1999-12-31'", "'4713-01-01 BC'"],
    "timestamp": ["'infinity'", "'-infinity'", "'2000-01-01 00:00:01'", "'294276-12-31'"],
    "timestamptz": ["'infinity'", "'-infinity'", "'2000-01-01 00:00:01+14'", "'1999-12-31 23:00-12'"],
}


@pytest.mark.parametrize("type_name", sorted(EXTREME_VALUES))
def test_the_read_of_a_numeric_qis_extremes_is_the_extremes_of_its_read(db, type_name):
    """The top's pass takes each numeric QI's extremes per leaf as values and reads them once
    (out_of_core.counted_leaves): the read (NaN, infinities, values beyond float8's range) must
    be monotone in the type's order, so that these are the extremes of the values' reads."""
    from plpy_anon.db.columns import NUMERIC_TYPES
    from plpy_anon.db.out_of_core import extreme_expression

    class Col:
        pass
    col = Col()
    col.type_name = type_name
    values = ", ".join(f"CAST('{v.strip(chr(39))}' AS {type_name})" for v in EXTREME_VALUES[type_name])
    of_values = NUMERIC_TYPES[type_name][0] % {"c": "x"}
    if NUMERIC_TYPES[type_name][2] != "int":
        of_values = f"({of_values})::float8"
    for subset in range(1, 1 << len(EXTREME_VALUES[type_name])):
        rows = (f"(SELECT x FROM unnest(ARRAY[{values}]) WITH ORDINALITY AS o(x, i) "
                f"WHERE ({subset} >> (i::int - 1)) & 1 = 1) AS r")
        got = db.execute(
            f"SELECT min({of_values}) IS NOT DISTINCT FROM (SELECT {extreme_expression(None, col, 'lo')} "
            f"FROM (SELECT min(x) AS lo FROM {rows}) AS m), "
            f"max({of_values}) IS NOT DISTINCT FROM (SELECT {extreme_expression(None, col, 'hi')} "
            f"FROM (SELECT max(x) AS hi FROM {rows}) AS m) FROM {rows}").fetchone()
        assert got == (True, True), (type_name, subset)


def sampled_ranks(db, schema, table, by_text: str, by_value: str) -> list:
    """The sample of ``table`` (QIs a, n, v, b, c; all its rows) read with the QIs of
    ``by_value`` (a Python dict literal: QI position -> kind) ranked from their values, with a
    window each, and by sample(): per QI [has NULL, labels, numbers], then the rows as tuples of
    their ranks (sorted), the rows, and the first QI's ranks in the rows' order; None where the
    read falls back."""
    seen = notices(db)
    db.execute("SELECT * FROM anon.versions()")          # the backend's environment is active
    db.execute(f"""DO LANGUAGE plpython3u $$
import json
from plpy_anon.db import columns, guards, out_of_core
tbl = guards.table(plpy, '{schema}.{table}')
cols = {{c.name: c for c in columns.table_columns(plpy, tbl)}}
src = out_of_core.Source(plpy, tbl, [cols[n] for n in ['a', 'n', 'v', 'b', 'c']], [],
                         out_of_core.source_members(plpy, tbl), True)
def shown(found):
    if found is None:
        return None
    kept = [c for c in found[0] if c is not None]
    # the rows as tuples of their ranks: a window's sort leaves them in another order
    return [[c.has_null, list(c.labels), None if c.values is None else c.values.tolist()]
            for c in kept] + [sorted(zip(*(c.ranks.tolist() for c in kept))), found[2],
                              kept[0].ranks.tolist()]
plpy.notice(json.dumps([shown(out_of_core._sampled(src, 100.0, False, {by_text}, {by_value})),
                  shown(out_of_core._sampled(src, 100.0, False, {by_text}, {{}})),
                  shown(out_of_core.sample(src, 100.0, False, {by_text}))]))
$$""")
    return json.loads(seen[-1])


def test_sample_ranks_read_as_values_are_the_windows_ranks(db, schema):
    """An integer, date or byte-ordered text QI of the sample is ranked from its values in the
    backend (out_of_core._sampled): the same ranks (NULL lowest), labels and numbers as a dense
    rank window over the same rows, and a text holding the reader's separator falls back to the
    windows."""
    db.execute("CREATE TABLE sranks (id int, a int4, n int2, v date, b text, c text)")
    db.execute("""INSERT INTO sranks
        SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE (g * 37) % 101 - 50 END, (g * 13) % 17,
               CASE WHEN g % 11 = 0 THEN NULL WHEN g % 13 = 0 THEN 'infinity'::date
                    WHEN g % 17 = 0 THEN '-infinity'::date ELSE DATE '2020-02-29' + (g * 7) % 400 END,
               CASE WHEN g % 5 = 0 THEN NULL ELSE (ARRAY['é', 'Z', 'a', 'ab', 'B', ''])[g % 6 + 1] END,
               (ARRAY['x', 'y', 'z'])[g % 3 + 1]
        FROM generate_series(1, 700) g""")
    by_value = "{0: 'int4', 1: 'int2', 2: 'date', 3: 'text', 4: 'text'}"
    fast, windows, chosen = sampled_ranks(db, schema, "sranks", "{3, 4}", by_value)
    assert fast[:-1] == windows[:-1] == chosen[:-1]     # labels, numbers, rows of ranks, rows
    assert fast[-2] == 700 and len(fast[-3]) == 700
    a, n, v, b = fast[:4]
    assert a[0] and not n[0] and v[0] and b[0]             # NULL read where it is
    assert v[1][0] == "-infinity" and v[1][-1] == "infinity"
    assert b[1] == sorted(b[1], key=lambda t: t.encode())  # the texts' bytes, not the collation
    assert len({row[3] for row in fast[-3]}) == len(b[1]) + 1
    expected = db.execute("SELECT dense_rank() OVER (ORDER BY a NULLS FIRST) FROM sranks "
                          "ORDER BY id").fetchall()
    assert fast[-1] == [r[0] for r in expected]           # the rows in the heap's order
    db.execute("UPDATE sranks SET c = E'x\\x01y' WHERE id = 5")
    fast, windows, chosen = sampled_ranks(db, schema, "sranks", "{3, 4}", by_value)
    assert fast is None and windows is not None
    assert chosen[:-1] == windows[:-1]       # sample() read it again with the windows
