"""Adversarial: Mondrian releases of texts and dates at the edges of their transport -- the read
joins a chunk's texts by 0x01 with NULL as 0x02 (a chunk holding either is read again as bytes),
dates travel as date_send's days, and a slice's class literals travel packed in one text per
column split by a separator none of them holds. The texts hold those very bytes, the packing's
separators, quotes, backslashes, braces, the empty string, NULL, 'NULL', long texts and other
scripts; the dates are +-infinity, NULL and PostgreSQL's first and last days. Several chunks
(plpy_anon.read_chunk_blocks = 1), in memory on either layout and out of core. Checked from the
released rows: every source row once, inside its class's date range and value set, its
sensitive value exact, classes of k rows and l distinct sensitive values."""
from __future__ import annotations

import pytest

from tests.helpers import class_sizes, create_release, distinct_sensitive_per_class

ODD_TEXTS = ["\x01", "a\x01b", "\x02", "\x02\x01", "", None, "\x1f", "\x1e\x1d\x1c", '"q"',
             "back\\slash", "NULL", "{x,y}", "x" * 3000, "ünï €", "tab\there\nline", "\x1f\x1e\x1d\x1c\x01\x02"]
ODD_DATES = ["infinity", "-infinity", None, "4713-01-01 BC", "5874897-12-31", "2000-01-01",
             "1999-12-31", "2024-02-29"]
QIS = ["d", "w"]


@pytest.fixture
def odd(db):
    db.execute("CREATE TABLE odd (id int, d date, w text, s text, pad text)")
    # the first 300 rows plain: the odd texts first show up chunks later, in either column
    db.execute("""INSERT INTO odd SELECT i, date '2010-01-01' + i % 50, 'w' || i % 7, 's' || i % 4,
                  repeat('p', 200) FROM generate_series(1, 300) i""")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO odd VALUES (%s, %s::date, %s, %s, 'p')",
                        [(300 + i, ODD_DATES[i % len(ODD_DATES)], ODD_TEXTS[i % len(ODD_TEXTS)],
                          ODD_TEXTS[(i * 5 + 3) % len(ODD_TEXTS)], ) for i in range(1, 161)])
    db.execute("SET plpy_anon.read_chunk_blocks = 1")
    yield
    for name in ["plpy_anon.read_chunk_blocks", *PARALLEL]:
        db.execute(f"RESET {name}")
    db.execute("RESET plpy_anon.build_memory")


def check_truthful(db, rel: str, k: int, l: int) -> None:
    assert db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (460, 460)
    outside = db.execute(f"""
        SELECT count(*) FROM {rel} r JOIN odd t USING (id)
        WHERE NOT ((t.d IS NULL OR r.d @> t.d)
                   AND EXISTS (SELECT 1 FROM unnest(r.w) u WHERE u IS NOT DISTINCT FROM t.w)
                   AND r.s IS NOT DISTINCT FROM t.s)""").fetchone()[0]
    assert outside == 0
    # every value a class lists is a value one of its rows holds
    invented = db.execute(f"""
        SELECT count(*) FROM (SELECT DISTINCT d, w FROM {rel}) c, unnest(c.w) u
        WHERE NOT EXISTS (SELECT 1 FROM {rel} r JOIN odd t USING (id)
                          WHERE r.d IS NOT DISTINCT FROM c.d AND r.w = c.w
                            AND t.w IS NOT DISTINCT FROM u)""").fetchone()[0]
    assert invented == 0
    assert min(class_sizes(db, rel, QIS)) >= k
    assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= l


PARALLEL = {"force_parallel_mode": "on", "parallel_setup_cost": "0", "parallel_tuple_cost": "0",
            "min_parallel_table_scan_size": "0", "max_parallel_workers_per_gather": "2"}


@pytest.mark.parametrize("layout, memory, parallel", [
    ("flat", None, False), ("compact", None, False), (None, "1kB", False), (None, "1kB", True)])
def test_odd_texts_and_edge_dates_are_released_truthfully_over_several_chunks(
        db, schema, odd, layout, memory, parallel):
    """Out of core, also with every region's read pushed into parallel workers (whose rows
    reach the aggregates in another order at each read, a chunk read again included)."""
    if memory:
        db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
    for name, value in PARALLEL.items() if parallel else ():
        db.execute("SELECT set_config(%s, %s, false)", (name, value))
    extra = {"layout": layout} if layout else {}
    rel = create_release(db, "mondrian_view", schema, "odd", k=4, l=2, quasi_identifiers=QIS,
                         sensitive=["id", "s"], **extra)
    verified, metrics = db.execute(
        "SELECT verified, metrics FROM anon.releases WHERE format('%%I.%%I', release_schema, "
        "release_name) = %s", (rel,)).fetchone()
    assert verified
    if memory:
        assert metrics["out_of_core"]["regions"] > 1
    check_truthful(db, rel, 4, 2)


@pytest.mark.parametrize("tree", ["partitioned", "inherited"])
@pytest.mark.parametrize("memory", [None, "1kB"])
def test_odd_texts_on_one_member_of_a_tree_are_released_truthfully(db, schema, odd, tree, memory):
    """The same rows in a tree of three members, the odd texts and dates all in the last one
    (each member read a chunk at a time through the root: the chunk holding them read again)."""
    db.execute("ALTER TABLE odd RENAME TO flat_odd")
    if tree == "partitioned":
        db.execute("CREATE TABLE odd (id int, d date, w text, s text, pad text) PARTITION BY RANGE (id)")
        for n, (lo, hi) in enumerate([(0, 150), (150, 301), (301, 1000)]):
            db.execute(f"CREATE TABLE odd_{n} PARTITION OF odd FOR VALUES FROM ({lo}) TO ({hi})")
    else:
        db.execute("CREATE TABLE odd (id int, d date, w text, s text, pad text)")
        db.execute("CREATE TABLE odd_1 () INHERITS (odd)")
        db.execute("CREATE TABLE odd_2 () INHERITS (odd)")
    db.execute("INSERT INTO odd SELECT * FROM flat_odd WHERE id <= 150")
    db.execute(("INSERT INTO odd" if tree == "partitioned" else "INSERT INTO odd_1") +
               " SELECT * FROM flat_odd WHERE id > 150 AND id <= 300")
    db.execute(("INSERT INTO odd" if tree == "partitioned" else "INSERT INTO odd_2") +
               " SELECT * FROM flat_odd WHERE id > 300")
    if memory:
        db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
    rel = create_release(db, "mondrian_view", schema, "odd", k=4, l=2, quasi_identifiers=QIS,
                         sensitive=["id", "s"])
    check_truthful(db, rel, 4, 2)
