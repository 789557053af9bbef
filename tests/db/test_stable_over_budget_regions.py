"""A stable release whose source exceeds plpy_anon.build_memory is created region by region: each
region's people grouped, checked and remembered in turn (db/stable_regions.py). Checked from the
released rows: k, l, and every person's remembered candidates equal to the values of every
released class that holds them (the classes of all regions: a person lies only in their own
region's classes), against the in-memory creation of the same table. A tiny budget stands in
for a large table."""
from __future__ import annotations

import contextlib
import itertools

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import class_sizes, distinct_sensitive_per_class, release_schema_of
from tests.runs import SLOW_RUN

QIS = ["a", "b", "c"]
ROWS = 3000


@contextlib.contextmanager
def budget(db, size):
    db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (size,))
    try:
        yield
    finally:
        db.execute("RESET plpy_anon.build_memory")


def people(db, table, null_every: int | None = None):
    """id, two numbers of discrete ranges (an integer, a date), a text and a sensitive text."""
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, a int, b text, c date, s text)")
    a = "18 + (i * 37) % 70" if null_every is None else \
        f"CASE WHEN i % {null_every} = 0 THEN NULL ELSE 18 + (i * 37) % 70 END"
    db.execute(f"""INSERT INTO {table}
        SELECT i, {a}, (ARRAY['north', 'south', 'east', 'west'])[1 + (i * 7) % 4],
               DATE '2000-01-01' + (i * 13) % 500,
               (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'ok'])[1 + (i * 11) % 5]
        FROM generate_series(1, {ROWS}) i""")


def stable(db, schema, table, name, **kwargs):
    args = "".join(f", {key} => %({key})s" for key in kwargs)
    return db.execute(f"SELECT anon.mondrian_view(%(t)s, k => 10, l => 2, quasi_identifiers => %(q)s, "
                      f"sensitive => ARRAY['s'], release_schema => %(rs)s, release_name => %(n)s, "
                      f"refresh_mode => 'stable'{args})::text",
                      {"t": table, "q": QIS, "rs": release_schema_of(schema), "n": name,
                       **kwargs}).fetchone()[0]


def catalog(db, rel):
    return db.execute("""
        SELECT release_id, metrics -> 'out_of_core', verification -> 'across_versions'
        FROM anon.releases WHERE format('%%I.%%I', release_schema, release_name) = %s""",
                      (rel,)).fetchone()


def candidates_from_released_rows(db, rel, table):
    """(people whose remembered candidates are not the values of every released class holding
    them, fewest such values of anyone), from the released rows alone."""
    release_id = catalog(db, rel)[0]
    return db.execute(f"""
        WITH classes AS (SELECT a, b, c, array_agg(DISTINCT s) AS s FROM {rel} GROUP BY a, b, c),
        expected AS (
            SELECT sha256(decode(k.person_salt, 'hex') || convert_to(p.id::text, 'UTF8')) AS person,
                   jsonb_build_object('s', jsonb_agg(DISTINCT v.s ORDER BY v.s)) AS candidates,
                   count(DISTINCT v.s) AS n
            FROM {table} p CROSS JOIN anon.release_secrets k
            JOIN classes r ON r.a @> p.a AND p.b = ANY(r.b) AND r.c @> p.c
            CROSS JOIN LATERAL unnest(r.s) AS v(s)
            WHERE k.release_id = %(r)s GROUP BY 1)
        SELECT count(*) FILTER (WHERE x.candidates IS DISTINCT FROM e.candidates), min(e.n)
        FROM expected e FULL JOIN (SELECT person, candidates FROM anon.release_people
                                   WHERE release_id = %(r)s) AS x USING (person)""",
                      {"r": release_id}).fetchone()


def guarantees(db, rel, table):
    """k, l and the fewest candidates, from the released rows."""
    mismatched, fewest = candidates_from_released_rows(db, rel, table)
    assert mismatched == 0
    return (min(class_sizes(db, rel, QIS)), min(distinct_sensitive_per_class(db, rel, QIS, "s")),
            fewest)


@pytest.mark.parametrize("layout", ["compact", "flat"])
def test_stable_creation_over_the_budget_keeps_the_in_memory_creations_guarantees(db, schema, layout):
    people(db, "t")
    in_memory = stable(db, schema, "t", "whole", layout=layout)
    with budget(db, "256kB"):
        regions = stable(db, schema, "t", "regions", layout=layout)
    _, ooc, across = catalog(db, regions)
    assert ooc["stable_regions"] and ooc["regions"] > 1 and across["regions"] == ooc["regions"]
    assert catalog(db, in_memory)[1] is None
    assert db.execute(f"SELECT count(*) FROM {regions}").fetchone()[0] == ROWS
    k, l, fewest = guarantees(db, regions, "t")
    assert k >= 10 and l >= 2 and fewest >= 2
    whole_k, whole_l, whole_fewest = guarantees(db, in_memory, "t")
    assert whole_k >= 10 and whole_l >= 2 and whole_fewest >= 2
    # the figures the check records are the in-memory check's, over the same people
    whole_across = catalog(db, in_memory)[2]
    assert set(whole_across) | {"regions"} == set(across)
    assert across["people"] == whole_across["people"] == ROWS
    assert across["below_l"] == across["disclosed"] == across["unsafe_unions"] == 0
    assert across["fewest_candidates"] == fewest
    # every person remembered, in rows of several regions, each region's in the order of hashes
    release_id = catalog(db, regions)[0]
    rows = db.execute("SELECT count(DISTINCT region), min(chunks), max(chunks), count(*) "
                      "FROM anon.release_state WHERE release_id = %s", (release_id,)).fetchone()
    assert rows[0] == ooc["regions"] and rows[1] == rows[2] == rows[3]
    assert db.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s",
                      (release_id,)).fetchone()[0] == ROWS
    # the version stored: one multiset per released class
    sizes = db.execute("SELECT cardinality(group_ids), (SELECT sum(x) FROM unnest(sizes) x) "
                       "FROM anon.release_versions WHERE release_id = %s", (release_id,)).fetchall()
    assert sizes == [(len(class_sizes(db, regions, QIS)), ROWS)]


def test_a_release_created_region_by_region_is_refreshed_so_then_in_memory(db, schema):
    """Leavers and joiners (nobody left their box): the refresh beyond the budget runs region by
    region; the state it writes, in rows of several regions, is then read whole by a refresh in
    memory (in the order of its hashes)."""
    people(db, "t")
    with budget(db, "256kB"):
        rel = stable(db, schema, "t", "grown")
    db.execute(f"DELETE FROM t WHERE id % 40 = 0; INSERT INTO t SELECT i, 18 + i % 70, 'north', "
               f"DATE '2000-06-01', 'flu' FROM generate_series({ROWS + 1}, {ROWS + 100}) i")
    with budget(db, "256kB"):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    _, ooc, across = catalog(db, rel)
    assert ooc["refreshed_by_regions"]
    assert across["below_l"] == 0 and across["versions_compared"] == 1
    assert across["seen_before"] == ROWS - ROWS // 40
    assert min(class_sizes(db, rel, QIS)) >= 10
    db.execute("SELECT anon.refresh(%s)", (rel,))
    _, ooc, across = catalog(db, rel)
    assert not ooc and across["below_l"] == 0 and across["versions_compared"] == 2
    assert min(class_sizes(db, rel, QIS)) >= 10
    assert db.execute("SELECT count(DISTINCT region) FROM anon.release_state WHERE release_id = %s",
                      (catalog(db, rel)[0],)).fetchone()[0] == 1


def test_a_null_in_a_ranged_qi_is_refused_region_by_region_and_leaves_nothing(db, schema):
    people(db, "t", null_every=97)
    with budget(db, "256kB"), pytest.raises(psycopg.Error) as refused:
        stable(db, schema, "t", "nulls")
    assert refused.value.sqlstate == "54000"
    assert 'column "a"' in str(refused.value) and "fresh" in refused.value.diag.message_hint
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_name = 'nulls'").fetchone()[0] == 0
    assert db.execute("SELECT to_regclass(%s)", (f"{release_schema_of(schema)}.nulls",)).fetchone()[0] is None


EXAMPLE = itertools.count()


@pytest.mark.more_examples
@settings(max_examples=30 if SLOW_RUN else 4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(400, 1000), k=st.sampled_from([3, 5, 10]),
       values=st.integers(2, 6), budget_kb=st.sampled_from([16, 32]))
def test_random_tables_created_region_by_region_remember_what_the_released_rows_show(
        db, schema, seed, rows, k, values, budget_kb):
    """On random tables and budgets: a stable release created region by region holds k and l
    from its released rows, and every person's remembered candidates are the values of every
    released class holding them (all regions' classes); or its check refuses it (22000: someone
    below l), never publishing it."""
    rng = np.random.default_rng(seed)
    # ~104 bytes a row estimated: every table here exceeds the budget
    table, n, span = f"r{next(EXAMPLE)}", rows, int(rng.integers(5, 200))
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, a int, b text, c date, s text)")
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, DATE '2000-01-01' + %s, %s)", [
            (i, int(rng.integers(0, span)), f"b{int(rng.integers(0, 5))}",
             int(rng.integers(0, 400)), f"v{int(rng.zipf(1.5)) % values}") for i in range(n)])
    try:
        with budget(db, f"{budget_kb}kB"):
            rel = db.execute(
                "SELECT anon.mondrian_view(%(t)s, k => %(k)s, l => 2, quasi_identifiers => %(q)s, "
                "sensitive => ARRAY['s'], release_schema => %(rs)s, release_name => %(n)s, "
                "refresh_mode => 'stable')::text",
                {"t": table, "n": table, "k": k, "q": QIS, "rs": release_schema_of(schema)}).fetchone()[0]
    except psycopg.Error as error:
        assert error.sqlstate in ("22000", "22023"), str(error)   # below l, or too few values
        assert db.execute("SELECT count(*) FROM anon.releases WHERE release_name = %s",
                          (table,)).fetchone()[0] == 0
        return
    assert catalog(db, rel)[1]["stable_regions"] and catalog(db, rel)[1]["regions"] > 1
    got_k, got_l, fewest = guarantees(db, rel, table)
    assert got_k >= k and got_l >= 2 and fewest >= 2
    assert catalog(db, rel)[2]["fewest_candidates"] == fewest


@pytest.mark.parametrize("odd", ["fl\x01u", "\x02"], ids=["separator", "null_mark"])
def test_the_version_stored_region_by_region_is_every_released_value(db, schema, odd):
    """The version's values (one per published row) stored whole, a value that is or holds a
    mark of the joined form included, as the released rows show them."""
    people(db, "t")
    db.execute("UPDATE t SET s = %s WHERE id %% 7 = 0", (odd,))
    with budget(db, "256kB"):
        rel = stable(db, schema, "t", "marks")
    release_id = catalog(db, rel)[0]
    stored = db.execute("SELECT x, count(*) FROM anon.release_versions v, unnest(v.vals) AS x "
                        "WHERE v.release_id = %s GROUP BY x ORDER BY x", (release_id,)).fetchall()
    shown = db.execute(f"SELECT s, count(*) FROM {rel} GROUP BY s ORDER BY s").fetchall()
    assert stored == shown and dict(shown)[odd] == ROWS // 7
