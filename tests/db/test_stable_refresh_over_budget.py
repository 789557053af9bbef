"""A stable release created beyond plpy_anon.build_memory stores the box of each region of its
state (anon.release_regions, SQL 485); its refresh beyond the budget finds, in SQL, which
regions its people link (a known person whose QIs moved into another region's box), and is
refused (54000) before anything is written: the merged regions named when they exceed the
budget, else the refresh region by region not built. Checked from the released rows and the
source: every released class lies inside one stored box, every row of the source in exactly
one, every remembered person in their region's; the movers and merged regions the refusal
reports are those the source and the state show (on random churn too); the published version
stays readable."""
from __future__ import annotations

import datetime
import json

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tests.db.test_custodian import custodian_role
from tests.db.test_stable_over_budget_regions import QIS, ROWS, catalog, people, stable
from tests.helpers import budget, class_sizes, distinct_sensitive_per_class
from tests.runs import SLOW_RUN

TINY = "256kB"


def parse(name: str, text):
    if text is None:
        return None
    return {"a": int, "c": datetime.date.fromisoformat}.get(name, str)(text)


def on_left(cut: dict, value) -> bool:
    """Whether ``value`` (None: NULL) lies on the left side of a stored cut."""
    if "texts" in cut:
        if value is None:
            return cut["null_left"]
        return (value in cut["texts"]) == cut["texts_left"]
    if cut["value"] is None or value is None:
        return value is None
    bound = parse(cut["name"], cut["value"])
    return value < bound if cut["strict"] else value <= bound


def in_box(box: list, point: dict) -> bool:
    """Whether a point ({QI: every value it takes: a row's one, a class's ends or elements})
    lies inside a stored box."""
    return all(on_left(cut, v) == cut["left"] for cut in box for v in point[cut["name"]])


def boxes(db, release_id: int) -> list:
    rows = db.execute("SELECT region, bounds FROM anon.release_regions WHERE release_id = %s "
                      "ORDER BY region", (release_id,)).fetchall()
    assert [r for r, _ in rows] == list(range(len(rows)))
    return [b for _, b in rows]


def class_points(db, rel: str) -> list[dict]:
    """Each released class's corners: each range's lowest and highest value, each set's values."""
    out = []
    for a, b, c in db.execute(f"SELECT DISTINCT a, b, c FROM {rel}").fetchall():
        out.append({"a": [a.lower, a.upper - 1], "b": list(b),
                    "c": [c.lower, c.upper - datetime.timedelta(days=1)]})
    return out


def row_regions(db, table: str, release_id: int, stored: list) -> dict:
    """Each person's hash -> (the box their row lies in now, the region of the state's row that
    remembers them, None for someone new), from the source and the state."""
    held = dict(db.execute(
        "SELECT substr(s.persons, 32 * (g - 1) + 1, 32), s.region FROM anon.release_state s, "
        "generate_series(1, octet_length(s.persons) / 32) g WHERE s.release_id = %s",
        (release_id,)).fetchall())
    out = {}
    for person, a, b, c in db.execute(
            f"SELECT sha256(decode(k.person_salt, 'hex') || convert_to(t.id::text, 'UTF8')), "
            f"t.a, t.b, t.c FROM {table} t, anon.release_secrets k WHERE k.release_id = %s",
            (release_id,)).fetchall():
        inside = [i for i, box in enumerate(stored) if in_box(box, {"a": [a], "b": [b], "c": [c]})]
        assert len(inside) == 1, (a, b, c, inside)        # the boxes cover the domain, disjoint
        out[bytes(person)] = (inside[0], held.get(person))
    return out


def merged_from(regions: dict, n: int) -> list[set]:
    """The regions people link (a person remembered in one and lying in another), merged."""
    groups = [{i} for i in range(n)]
    for now, before in regions.values():
        if before is not None and before != now:
            a = next(g for g in groups if now in g)
            b = next(g for g in groups if before in g)
            if a is not b:
                a |= b
                groups.remove(b)
    return groups


def refused(db, rel: str, size: str = TINY) -> psycopg.Error:
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    with budget(db, size), pytest.raises(psycopg.Error) as error:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert error.value.sqlstate == "54000"
    # nothing half-built: the published version is read as it was
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
    return error.value


def guarantees_hold(db, rel: str) -> None:
    assert min(class_sizes(db, rel, QIS)) >= 10
    assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= 2


def test_the_creation_stores_each_regions_box_holding_its_classes_rows_and_people(db, schema):
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "boxed")
    release_id, ooc, _ = catalog(db, rel)
    stored = boxes(db, release_id)
    assert len(stored) == ooc["regions"] > 1
    # every released class lies inside exactly one stored box
    for point in class_points(db, rel):
        assert sum(in_box(box, point) for box in stored) == 1, point
    # every row in exactly one box, and remembered in that box's region
    regions = row_regions(db, "t", release_id, stored)
    assert len(regions) == ROWS and all(now == before for now, before in regions.values())
    # a refresh in memory rewrites the state as one region: the boxes go with the regions
    db.execute("UPDATE t SET a = 18 + (a + 20) % 70 WHERE id % 7 = 0")
    db.execute("SELECT anon.refresh(%s)", (rel,))
    assert boxes(db, release_id) == []
    assert db.execute("SELECT max(region) FROM anon.release_state WHERE release_id = %s",
                      (release_id,)).fetchone() == (0,)
    guarantees_hold(db, rel)
    # and over the budget that state is refused as before (no boxes to plan with)
    error = refused(db, rel)
    assert "region by region" in error.diag.message_detail
    # dropped: the boxes of a release created over the budget go with it
    with budget(db, TINY):
        again = stable(db, schema, "t", "dropped")
    again_id = catalog(db, again)[0]
    assert boxes(db, again_id)
    db.execute("SELECT anon.drop_release(%s)", (again,))
    assert boxes(db, again_id) == []


def test_a_refresh_whose_people_stay_in_their_boxes_plans_one_group_a_region(db, schema):
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "staying")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    # leavers, joiners, comebacks, and QI updates within each person's box
    db.execute("CREATE TABLE gone AS SELECT * FROM t WHERE id % 25 = 0")
    db.execute("DELETE FROM t WHERE id % 25 = 0")
    db.execute(f"INSERT INTO t SELECT i, 18 + (i * 37) % 70, 'east', DATE '2000-01-01' + i % 500, "
               f"'flu' FROM generate_series({ROWS + 1}, {ROWS + 200}) i")
    db.execute("INSERT INTO t SELECT * FROM gone WHERE id % 50 = 0")
    db.execute("UPDATE t SET s = 'ok' WHERE id % 9 = 0")
    regions = row_regions(db, "t", release_id, stored)
    assert all(before is None or before == now for now, before in regions.values())
    error = refused(db, rel)
    figures = json.loads(error.diag.message_detail)
    assert "the refresh region by region is not built" in error.diag.message_primary
    assert figures["movers"] == 0 and figures["groups"] == len(stored)
    assert figures["joiners"] == sum(before is None for _, before in regions.values()) == 200
    assert figures["rows"] == [sum(now == i for now, _ in regions.values())
                               for i in range(len(stored))]
    guarantees_hold(db, rel)
    # a stored box its creation did not write (its owner may write its own rows): 22000, named
    before = db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0]
    for bad in ('[{"qi": 0, "name": "a", "left": true, "strict": true, "value": 5}]',
                '[{"qi": 1, "name": "a", "left": true, "strict": true, "value": "5"}]',
                ('[{"qi": 1, "name": "b", "left": true, "strict": false, "texts": [1], '
                 '"texts_left": true, "null_left": false}]'), '[1]', '["a"]'):
        db.execute("UPDATE anon.release_regions SET bounds = %s WHERE release_id = %s AND region = 0",
                   (bad, release_id))
        with budget(db, TINY), pytest.raises(psycopg.Error) as error:
            db.execute("SELECT anon.refresh(%s)", (rel,))
        assert error.value.sqlstate == "22000", bad
        assert "anon.release_regions" in error.value.diag.message_primary
        assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == before


def test_people_moving_across_boxes_merge_regions_and_a_merged_group_over_the_budget_is_refused(
        db, schema):
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "moving")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    # a few people's QIs move into another box (a across its whole domain)
    db.execute("UPDATE t SET a = 18 + (a + 35) % 70 WHERE id % 300 = 0")
    regions = row_regions(db, "t", release_id, stored)
    movers = sum(before is not None and before != now for now, before in regions.values())
    assert movers > 0
    expected = merged_from(regions, len(stored))
    largest = max(expected, key=lambda g: (sum(now in g for now, _ in regions.values()), -min(g)))
    error = refused(db, rel)
    figures = json.loads(error.diag.message_detail)
    assert figures["movers"] == movers and figures["groups"] == len(expected) < len(stored)
    assert set(figures["largest_group"]) == largest
    assert figures["largest_group_rows"] == sum(now in largest for now, _ in regions.values())
    if figures["largest_group_bytes"] > figures["region_budget_bytes"]:
        assert f"would hold {len(largest)} of its {len(stored)} regions together" in \
            error.diag.message_primary
        assert "moved into another region's box" in error.diag.message_primary
    # everyone moving: the regions their boxes link held together, over the budget
    db.execute("UPDATE t SET a = 18 + (a + 35) % 70, c = c + 250")
    regions = row_regions(db, "t", release_id, stored)
    expected = merged_from(regions, len(stored))
    largest = max(expected, key=lambda g: (sum(now in g for now, _ in regions.values()), -min(g)))
    assert len(largest) > 1
    error = refused(db, rel)
    figures = json.loads(error.diag.message_detail)
    assert figures["groups"] == len(expected) and set(figures["largest_group"]) == largest
    assert figures["largest_group_bytes"] > figures["region_budget_bytes"]
    assert f"would hold {len(largest)} of its {len(stored)} regions together" in \
        error.diag.message_primary
    assert "SET plpy_anon.build_memory" in error.diag.message_hint
    guarantees_hold(db, rel)
    # within the budget the same refresh runs in memory and keeps k, l and the state
    db.execute("SELECT anon.refresh(%s)", (rel,))
    guarantees_hold(db, rel)
    _, _, across = catalog(db, rel)
    assert across["below_l"] == 0 and across["seen_before"] == ROWS


def test_a_null_in_a_ranged_qi_merges_every_region(db, schema):
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "nulls")
    stored = boxes(db, catalog(db, rel)[0])
    db.execute("ALTER TABLE t ALTER COLUMN a DROP NOT NULL")
    db.execute("UPDATE t SET a = NULL WHERE id = 7")
    figures = json.loads(refused(db, rel).diag.message_detail)
    assert figures["groups"] == 1 and figures["largest_group"] == list(range(len(stored)))
    assert "NULL" in figures["all_merged"]


def test_another_custodian_reads_no_box_of_a_stable_release(db, connect):
    owner = custodian_role(db, connect)
    intruder = custodian_role(db, connect)
    (role, own), (other, _) = next(owner), next(intruder)
    try:
        with connect(user=role) as conn:
            table = sql.Identifier(own, "t")
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, a int, b text, c date, s text)")
                         .format(table))
            conn.execute(sql.SQL(
                "INSERT INTO {} SELECT i, 18 + (i * 37) % 70, (ARRAY['n','s','e','w'])[1 + i % 4], "
                "DATE '2000-01-01' + (i * 13) % 500, (ARRAY['flu','hiv','ok'])[1 + (i * 11) % 3] "
                "FROM generate_series(1, 3000) i").format(table))
            with budget(conn, TINY):
                rel = conn.execute(
                    "SELECT anon.mondrian_view(%s, k => 10, l => 2, quasi_identifiers => %s, "
                    "sensitive => '{s}', refresh_mode => 'stable', release_schema => %s)::text",
                    (f"{own}.t", QIS, f"{own}_rel")).fetchone()[0]
            release_id = catalog(conn, rel)[0]
            shown = conn.execute("SELECT count(*) FROM anon.readable_release_regions "
                                 "WHERE release_id = %s", (release_id,)).fetchone()[0]
            assert shown > 1
        with connect(user=other) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="release_regions"):
                conn.execute("SELECT bounds FROM anon.release_regions WHERE release_id = %s",
                             (release_id,))
            conn.rollback()
            # the keys it may read (its own writes' WHERE clauses), row security hiding them
            assert conn.execute("SELECT count(*) FROM anon.release_regions WHERE release_id = %s",
                                (release_id,)).fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM anon.readable_release_regions WHERE "
                                "release_id = %s", (release_id,)).fetchone() == (0,)
            conn.execute("DELETE FROM anon.release_regions WHERE release_id = %s", (release_id,))
            conn.execute("UPDATE anon.release_regions SET region = region WHERE release_id = %s",
                         (release_id,))
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("INSERT INTO anon.release_regions VALUES (%s, 99, '[]')", (release_id,))
        assert db.execute("SELECT count(*) FROM anon.release_regions WHERE release_id = %s",
                          (release_id,)).fetchone() == (shown,)
    finally:
        for gen in (intruder, owner):
            next(gen, None)


CREATED: dict = {}


@pytest.mark.more_examples
@settings(max_examples=30 if SLOW_RUN else 2, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), leave=st.floats(0, 0.3), join=st.integers(0, 300),
       move=st.floats(0, 0.2), back=st.floats(0, 1))
def test_on_random_churn_the_refusals_plan_is_what_the_source_and_state_show(
        db, schema, seed, leave, join, move, back):
    """Random leavers, joiners, comebacks and QI updates (within and across boxes) of one
    release created region by region: the refusal's rows per box, joiners, movers and merged
    regions are those computed here from the source, the stored boxes and the state; the
    published version stays."""
    if schema not in CREATED:
        people(db, "t")
        db.execute("CREATE TABLE t_created AS TABLE t")
        with budget(db, TINY):
            CREATED[schema] = stable(db, schema, "t", "churned")
    rel = CREATED[schema]
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    rng = np.random.default_rng(seed)
    ids = np.arange(1, ROWS + 1)
    gone = ids[rng.random(ids.size) < leave]
    moved = ids[rng.random(ids.size) < move]
    back_ids = gone[rng.random(gone.size) < back]
    db.execute("DELETE FROM t WHERE id = ANY(%s::int[])", (gone.tolist(),))
    db.execute("INSERT INTO t SELECT * FROM t_created WHERE id = ANY(%s::int[])", (back_ids.tolist(),))
    db.execute("UPDATE t SET a = 18 + (a + %s) %% 70, c = c + %s WHERE id = ANY(%s::int[])",
               (int(rng.integers(0, 70)), int(rng.integers(-300, 300)), moved.tolist()))
    db.execute("INSERT INTO t SELECT i, 18 + (i * %s) %% 70, 'west', DATE '2000-01-01' + i %% 600, "
               "'hiv' FROM generate_series(%s::int, %s::int) i",
               (int(rng.integers(1, 50)), ROWS + 1, ROWS + join))
    try:
        regions = row_regions(db, "t", release_id, stored)
        expected = merged_from(regions, len(stored))
        figures = json.loads(refused(db, rel).diag.message_detail)
        assert figures["rows"] == [sum(now == i for now, _ in regions.values())
                                   for i in range(len(stored))]
        assert figures["joiners"] == sum(before is None for _, before in regions.values()) == join
        assert figures["movers"] == sum(before is not None and before != now
                                        for now, before in regions.values())
        assert figures["groups"] == len(expected)
        size = {min(g): sum(now in g for now, _ in regions.values()) for g in expected}
        assert figures["largest_group_rows"] == max(size.values())
        assert set(figures["largest_group"]) in [g for g in expected if size[min(g)] == max(size.values())]
    finally:
        db.execute("TRUNCATE t")
        db.execute("INSERT INTO t TABLE t_created")
