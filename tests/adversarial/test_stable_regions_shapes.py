"""A stable release created region by region (its source beyond plpy_anon.build_memory) attacked
from its released rows, against the same table created in memory: k, l, truthful classes (every
source row held by a class that publishes its value), every person's candidates (the values of
every released class whose ranges and sets hold their QIs, computed from the release alone), then
a refresh in memory and another after churn: no person pinned by intersecting the versions or by
their difference. Shapes: value sets, dates (with infinities), numeric and float8 with NaN and
infinities, timestamptz, int4 and int8 at their ends, ties and a value held by 90 % of the rows,
a categorical QI of many values across the region cuts, NULL in a set, quoted identifiers, a
partitioned source; and replace => true, a cancel, and another session inserting during the
build, at small budgets."""
from __future__ import annotations

import contextlib

import psycopg
import pytest
from psycopg import sql

from tests.helpers import (
    keep_released_version,
    pinned_by_difference,
    pinned_by_intersection,
    release_schema_of,
)

ROWS = 3000
K, L = 10, 2

#: name -> (column definitions, their expressions over i, QIs {name: 'range' | 'set'})
SHAPES = {
    "sets_dates_numbers": (
        "b text, c date, num numeric",
        ("(ARRAY['north','south','east','west','up','down'])[1 + (i * 7) % 6], "
        "DATE '2000-01-01' + (i * 13) % 500, "
        "CASE WHEN i % 50 = 0 THEN 'NaN'::numeric WHEN i % 51 = 0 THEN 'Infinity'::numeric "
        "WHEN i % 53 = 0 THEN '-Infinity'::numeric ELSE ((i * 37) % 700) / 7.0 END"),
        {"b": "set", "c": "range", "num": "range"}),
    "int8_ends": (
        "a int8, b text",
        ("CASE WHEN i % 2 = 0 THEN 9223372036854775807 - (i * 37) % 300 "
        "ELSE -9223372036854775808 + (i * 41) % 300 END, "
        "(ARRAY['x','y','z'])[1 + i % 3]"),
        {"a": "range", "b": "set"}),
    "int4_top": (
        "a int, b text",
        "2147483647 - (i * 37) % 300, (ARRAY['x','y','z'])[1 + i % 3]",
        {"a": "range", "b": "set"}),
    "dates_infinite": (
        "c date, b text",
        ("CASE WHEN i % 31 = 0 THEN 'infinity'::date WHEN i % 37 = 0 THEN '-infinity'::date "
         "ELSE DATE '2000-01-01' + (i * 13) % 500 END, (ARRAY['x','y','z'])[1 + i % 3]"),
        {"c": "range", "b": "set"}),
    "skewed_ties": (
        "a int, b text",
        "CASE WHEN i % 10 = 0 THEN (i * 37) % 100 ELSE 50 END, 'v' || (i * 7) % 12",
        {"a": "range", "b": "set"}),
    "ties_on_cuts": (
        "a int, c int",
        "(i * 7) % 6, (i * 13) % 5",
        {"a": "range", "c": "range"}),
    "categorical_across_cuts": (
        "a int, b text",
        "(i * 37) % 90, 'cat ' || lpad(((i * 7919) % 240)::text, 3, '0')",
        {"a": "range", "b": "set"}),
    "floats_times": (
        "f float8, w timestamptz, b text",
        ("CASE WHEN i % 41 = 0 THEN 'NaN'::float8 WHEN i % 43 = 0 THEN 'Infinity'::float8 "
         "WHEN i % 47 = 0 THEN '-Infinity'::float8 ELSE ((i * 37) % 700) / 7.0 END, "
         "TIMESTAMPTZ '2020-03-29 00:30+00' + ((i * 17) % 400) * INTERVAL '7 minutes', "
         "'b' || (i * 5) % 13"),
        {"f": "range", "w": "range", "b": "set"}),
    "quoted_names": (
        "\"Age Group\" int, \"it's\" text, \"MiXed\" date",
        ("18 + (i * 37) % 70, (ARRAY['a b','c''d','E \"f\"'])[1 + i % 3], "
        "DATE '1999-12-31' + (i * 11) % 300"),
        {"Age Group": "range", "it's": "set", "MiXed": "range"}),
}


@contextlib.contextmanager
def budget(db, size):
    db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (size,))
    try:
        yield
    finally:
        db.execute("RESET plpy_anon.build_memory")


def make_table(db, table, shape, first=1, last=ROWS, create=True):
    columns, values, _ = SHAPES[shape]
    if create:
        db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, {columns}, s text)")
    db.execute(f"INSERT INTO {table} SELECT i, {values}, "
               f"(ARRAY['flu','hiv','cancer','asthma','ok'])[1 + (i * 11) % 5] "
               f"FROM generate_series({first}, {last}) i")


def stable(db, schema, table, name, qis, **extra):
    args = [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in {
        "k": K, "l": L, "quasi_identifiers": list(qis), "sensitive": ["s"],
        "refresh_mode": "stable", "release_name": name,
        "release_schema": release_schema_of(schema), **extra}.items()]
    db.execute(sql.SQL("SELECT anon.mondrian_view({}, {})").format(
        sql.Literal(table), sql.SQL(", ").join(args)))
    return sql.SQL("{}.{}").format(sql.Identifier(release_schema_of(schema)),
                                   sql.Identifier(name)).as_string(db)


def out_of_core(db, schema, name):
    return db.execute("SELECT metrics -> 'out_of_core' FROM anon.releases WHERE release_schema = %s "
                      "AND release_name = %s", (release_schema_of(schema), name)).fetchone()[0]


def holds(qis, c="c", p="p"):
    return sql.SQL(" AND ").join(
        sql.SQL("{c}.{q} @> {p}.{q}" if kind == "range" else "{p}.{q} = ANY({c}.{q})").format(
            c=sql.Identifier(c), p=sql.Identifier(p), q=sql.Identifier(q))
        for q, kind in qis.items())


def guarantees(db, rel, table, qis):
    """k, l, truthful classes and every person's candidates, from the released rows; returns the
    analyst's kept version."""
    q = sql.SQL(", ").join(sql.Identifier(c) for c in qis)
    k, l, released = db.execute(sql.SQL(
        "SELECT min(n), min(d), sum(n) FROM (SELECT count(*) AS n, count(DISTINCT s) AS d "
        "FROM {} GROUP BY {}) g").format(sql.SQL(rel), q)).fetchone()
    assert k >= K and l >= L
    source = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    assert released == source
    # truthful: each source row lies in some class publishing its sensitive value
    untrue = db.execute(sql.SQL(
        "WITH c AS (SELECT {q}, array_agg(s) AS vals FROM {rel} GROUP BY {q}) "
        "SELECT count(*) FROM {t} p WHERE NOT EXISTS (SELECT FROM c WHERE {on} "
        "AND p.s = ANY(c.vals))").format(q=q, rel=sql.SQL(rel), t=sql.SQL(table),
                                          on=holds(qis))).fetchone()[0]
    assert untrue == 0, db.execute(sql.SQL("SELECT p.* FROM {t} p WHERE NOT EXISTS (SELECT FROM {rel} c WHERE {on} AND c.s = p.s) LIMIT 5").format(t=sql.SQL(table), rel=sql.SQL(rel), on=holds(qis))).fetchall()
    kept = keep_released_version(db, rel, table, "id", qis, "s")
    few = {p for p, cs in kept["people"].items()
           if len({v for n in cs for v in kept["classes"][n]}) < L}
    assert not few, f"{len(few)} people have fewer than l candidates"
    return kept


def attack(db, schema, table, shape, size="256kB", **extra):
    _, _, qis = SHAPES[shape]
    source = table
    if shape == "floats_times":
        # a float8 QI is released as a numrange: the analyst compares its exact value as numeric
        db.execute(f"CREATE VIEW analyst_{table} AS SELECT id, f::text::numeric AS f, w, b, s FROM {table}")
        table = f"analyst_{table}"
    whole = stable(db, schema, source, "whole", qis, **extra)
    with budget(db, size):
        rel = stable(db, schema, source, "regions", qis, **extra)
    ooc = out_of_core(db, schema, "regions")
    assert ooc and ooc.get("stable_regions") and ooc["regions"] > 1, ooc
    guarantees(db, whole, table, qis)
    kept = [guarantees(db, rel, table, qis)]
    db.execute(sql.SQL("SELECT anon.refresh({})").format(sql.Literal(rel)))
    kept.append(keep_released_version(db, rel, table, "id", qis, "s"))
    db.execute(f"DELETE FROM {source} WHERE id % 23 = 0")
    make_table(db, source, shape, ROWS + 1, ROWS + 150, create=False)
    db.execute(sql.SQL("SELECT anon.refresh({})").format(sql.Literal(rel)))
    kept.append(keep_released_version(db, rel, table, "id", qis, "s"))
    assert pinned_by_intersection(kept) == {}
    for i in range(len(kept)):
        for j in range(i + 1, len(kept)):
            assert pinned_by_difference(kept[i], kept[j]) == {}
    return rel


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_region_by_region_stable_creation_keeps_k_l_candidates_and_resists_pins(db, schema, shape):
    make_table(db, "t", shape)
    attack(db, schema, "t", shape)


def test_a_partitioned_source_created_region_by_region_resists_pins(db, schema):
    columns, _, _ = SHAPES["categorical_across_cuts"]
    db.execute(f"CREATE TABLE t (id int, {columns}, s text, PRIMARY KEY (id)) PARTITION BY RANGE (id)")
    for n, (low, high) in enumerate([(1, 1200), (1200, 2500), (2500, 100000)]):
        db.execute(f'CREATE TABLE "t Part {n}" PARTITION OF t FOR VALUES FROM ({low}) TO ({high})')
    make_table(db, "t", "categorical_across_cuts", create=False)
    attack(db, schema, "t", "categorical_across_cuts")


def test_replacing_a_stable_release_at_a_small_budget_starts_its_state_anew(db, schema):
    """replace => true of a stable release with history, at a small budget: the new release is
    built region by region, holds k, l and candidates, and remembers only its own people."""
    _, _, qis = SHAPES["sets_dates_numbers"]
    make_table(db, "t", "sets_dates_numbers")
    rel = stable(db, schema, "t", "r", qis)
    db.execute("DELETE FROM t WHERE id % 7 = 0")
    db.execute(sql.SQL("SELECT anon.refresh({})").format(sql.Literal(rel)))
    with budget(db, "128kB"):
        rel = stable(db, schema, "t", "r", qis, replace=True)
    ooc = out_of_core(db, schema, "r")
    assert ooc and ooc.get("stable_regions") and ooc["regions"] > 1, ooc
    guarantees(db, rel, "t", qis)
    release_id = db.execute("SELECT release_id FROM anon.releases WHERE release_schema = %s AND "
                            "release_name = 'r'", (release_schema_of(schema),)).fetchone()[0]
    people, versions = db.execute(
        "SELECT (SELECT count(*) FROM anon.release_people WHERE release_id = %(r)s), "
        "(SELECT count(*) FROM anon.release_versions WHERE release_id = %(r)s)",
        {"r": release_id}).fetchone()
    assert people == db.execute("SELECT count(*) FROM t").fetchone()[0] and versions == 1


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_a_cancel_during_a_region_by_region_replace_keeps_the_previous_release(
        db, schema, connect, fraction):
    """statement_timeout at a fraction of a warm backend's region-by-region replace: cancelled,
    the previous release's rows and state are as they were."""
    import time
    _, _, qis = SHAPES["categorical_across_cuts"]
    make_table(db, "t", "categorical_across_cuts")
    other = connect()
    other.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
    other.execute("SET plpy_anon.build_memory = '64kB'")
    started = time.monotonic()
    rel = stable(other, schema, "t", "r", qis)
    took = time.monotonic() - started
    ooc = out_of_core(db, schema, "r")
    assert ooc and ooc.get("stable_regions") and ooc["regions"] > 1, ooc
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3").fetchall()
    state = ("SELECT count(*), string_agg(md5(s::text), ',' ORDER BY md5(s::text)) "
             "FROM anon.release_state s JOIN anon.releases r USING (release_id) "
             "WHERE r.release_name = 'r' AND r.release_schema = %s")
    kept_state = db.execute(state, (release_schema_of(schema),)).fetchone()
    other.execute(f"SET statement_timeout = '{max(1, int(took * fraction * 1000))}ms'")
    try:
        stable(other, schema, "t", "r", qis, replace=True)
        cancelled = False
    except psycopg.errors.QueryCanceled:
        cancelled = True
    finally:
        other.close()
    if cancelled:
        assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3").fetchall() == before
        assert db.execute(state, (release_schema_of(schema),)).fetchone() == kept_state
    else:
        guarantees(db, rel, "t", qis)


def test_writes_during_a_region_by_region_build_are_refused_or_checked(db, schema, connect):
    """Another session inserts people while the release is built region by region: the build
    is refused (40001) and leaves nothing, or the released rows hold k and l and every person
    remembered has the candidates the released rows give them."""
    import threading
    import time
    _, _, qis = SHAPES["categorical_across_cuts"]
    make_table(db, "t", "categorical_across_cuts")
    stop = threading.Event()
    writer = connect()
    writer.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))

    written = []

    def write():
        i = ROWS // 10 + 100
        try:
            insert(i)
        except psycopg.Error as error:      # shown by the test
            written.append(error)

    def insert(i):
        while not stop.is_set():
            i += 1
            writer.execute(f"INSERT INTO t SELECT i, {SHAPES['categorical_across_cuts'][1]}, 'flu' "
                           f"FROM generate_series({i * 10}, {i * 10 + 9}) i")
            written.append(time.monotonic())
            time.sleep(0.005)
    thread = threading.Thread(target=write)
    thread.start()
    for _ in range(500):
        if written:
            break
        time.sleep(0.01)
    assert written and not isinstance(written[0], Exception), written[:1]
    try:
        with budget(db, "64kB"):
            rel = stable(db, schema, "t", "r", qis)
        refused = None
    except psycopg.Error as error:
        refused = error
    finally:
        stop.set()
        thread.join()
        writer.close()
    if refused is not None:
        assert refused.sqlstate == "40001", str(refused)
        assert db.execute("SELECT count(*) FROM anon.releases WHERE release_name = 'r' AND "
                          "release_schema = %s", (release_schema_of(schema),)).fetchone()[0] == 0
        return
    q = sql.SQL(", ").join(sql.Identifier(c) for c in qis)
    k, l, released = db.execute(sql.SQL(
        "SELECT min(n), min(d), sum(n) FROM (SELECT count(*) AS n, count(DISTINCT s) AS d "
        "FROM {} GROUP BY {}) g").format(sql.SQL(rel), q)).fetchone()
    assert k >= K and l >= L
    release_id = db.execute("SELECT release_id FROM anon.releases WHERE release_schema = %s AND "
                            "release_name = 'r'", (release_schema_of(schema),)).fetchone()[0]
    remembered = db.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s",
                            (release_id,)).fetchone()[0]
    assert remembered == released
    wrong = db.execute(sql.SQL("""
        WITH classes AS (SELECT {q}, array_agg(DISTINCT s) AS vals FROM {rel} GROUP BY {q}),
        expected AS (
            SELECT sha256(decode(k.person_salt, 'hex') || convert_to(p.id::text, 'UTF8')) AS person,
                   jsonb_build_object('s', jsonb_agg(DISTINCT v.s ORDER BY v.s)) AS candidates
            FROM t p CROSS JOIN anon.release_secrets k JOIN classes c ON {on}
            CROSS JOIN LATERAL unnest(c.vals) AS v(s)
            WHERE k.release_id = %(r)s GROUP BY 1)
        SELECT count(*) FROM anon.release_people x LEFT JOIN expected e USING (person)
        WHERE x.release_id = %(r)s AND x.candidates IS DISTINCT FROM e.candidates""").format(
        q=q, rel=sql.SQL(rel), on=holds(qis)), {"r": release_id}).fetchone()[0]
    assert wrong == 0


@pytest.mark.parametrize("size", ["64kB", "128kB"])
@pytest.mark.parametrize("shape", ["floats_times", "sets_dates_numbers"])
def test_region_by_region_stable_creation_at_other_budgets(db, schema, shape, size):
    make_table(db, "t", shape)
    attack(db, schema, "t", shape, size=size)


def test_a_null_in_a_qi_released_as_a_set_is_held_region_by_region(db, schema):
    """NULL in a text QI (a value of its set to an analyst, unlike a range's NULL): created region
    by region as in memory, each person with a NULL held by the classes whose sets hold NULL."""
    _, _, qis = SHAPES["categorical_across_cuts"]
    make_table(db, "t", "categorical_across_cuts")
    db.execute("UPDATE t SET b = NULL WHERE id % 9 = 0")
    stable(db, schema, "t", "whole", qis)
    with budget(db, "128kB"):
        rel = stable(db, schema, "t", "regions", qis)
    ooc = out_of_core(db, schema, "regions")
    assert ooc and ooc.get("stable_regions") and ooc["regions"] > 1, ooc
    fewest, untrue = db.execute(sql.SQL("""
        WITH c AS (SELECT a, b, array_agg(s) AS vals FROM {rel} GROUP BY a, b),
        held AS (SELECT p.id, p.s, array_agg(v) AS vals FROM t p JOIN c ON c.a @> p.a AND
                 EXISTS (SELECT FROM unnest(c.b) x WHERE x IS NOT DISTINCT FROM p.b),
                 unnest(c.vals) v GROUP BY p.id, p.s)
        SELECT min((SELECT count(DISTINCT x) FROM unnest(vals) x)),
               count(*) FILTER (WHERE NOT s = ANY(vals)) + (SELECT count(*) FROM t) - count(*)
        FROM held""").format(rel=sql.SQL(rel))).fetchone()
    assert fewest >= L and untrue == 0


def test_a_stable_creation_region_by_region_outside_utc_holds_as_in_utc(db, schema):
    """The shape floats_times (a timestamptz QI from 2020-03-29 00:30 UTC, the night clocks went
    forward in Europe/London) created region by region in a Europe/London session, as in UTC:
    the check reads each region again in the caller's session, after the run function (whose
    TimeZone is UTC) read it, and must read a summer instant's text ('... +00') as the run did,
    not as '... +01' (the records would differ: 40001, nothing published)."""
    db.execute("SET TimeZone = 'Europe/London'")
    try:
        make_table(db, "t", "floats_times")
        attack(db, schema, "t", "floats_times", size="64kB")
    finally:
        db.execute("RESET TimeZone")
