"""Adversarial: movers at a stable refresh region by region beyond plpy_anon.build_memory
(db/stable_regions.py: plan_refresh lists each known person whose row left the box of the
region remembering them by (tableoid, ctid), the region reads them, the check finds their
classes by their released ranges). Attacked by an analyst who keeps every version and knows
everyone's QIs (classes of movers that share their released ranges with other regions'
classes; move, move back, leave and come back elsewhere), by the source's writer (rows moved
across partitions), and past the plan's most movers. Every published version is judged from
its released rows: k, l, nobody below l across all versions kept, nobody pinned by
differencing two of them; a refused refresh keeps the published rows."""
from __future__ import annotations

import datetime
import time

import psycopg
import pytest
from psycopg import sql

from tests.adversarial.test_stable_region_refresh_attacks import regions_of_rows
from tests.db.test_interrupts import Running
from tests.db.test_stable_over_budget_regions import ROWS, catalog, people, stable
from tests.db.test_stable_refresh_over_budget import (
    TINY,
    boxes,
    in_box,
    remembered_regions,
    row_regions,
)
from tests.helpers import (
    budget,
    class_sizes,
    distinct_sensitive_per_class,
    intersected_candidates,
    keep_released_version,
    pinned_by_difference,
)

QIS = ["a", "b", "c"]


def keeps(db, rel: str, kinds: dict) -> dict:
    return keep_released_version(db, rel, "t", "id", kinds, "s")


def safe(db, rel: str, kept: list) -> None:
    """k and l of the newest version from its rows; nobody below l intersecting every version
    kept; nobody pinned by differencing any two of them."""
    assert min(class_sizes(db, rel, QIS)) >= 10
    assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= 2
    below = {p: sorted(v) for p, v in intersected_candidates(kept).items() if len(v) < 2}
    assert below == {}, f"{len(below)} people below l = 2 across the versions: {below}"
    pinned = {p: v for j in range(1, len(kept)) for i in range(j)
              for p, v in pinned_by_difference(kept[i], kept[j]).items()}
    assert pinned == {}, f"{len(pinned)} people pinned by differencing two versions: {pinned}"


def refresh_by_regions(db, rel: str, stored: list, kept: list, kinds: dict,
                       point=None) -> dict:
    """One refresh beyond the budget, published region by region: every known person still
    remembered by the region remembering them before, nobody by two; safe across the versions.
    Returns the release's out-of-core figures."""
    release_id = catalog(db, rel)[0]
    before = row_regions_of(db, release_id, stored, point)
    movers = sum(1 for now, was in before.values() if was is not None and was != now)
    with budget(db, TINY):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    ooc = catalog(db, rel)[1]
    assert ooc["refreshed_by_regions"] and ooc["movers"] == movers, (ooc, movers)
    after = row_regions_of(db, release_id, stored, point)
    for person, (now, was) in before.items():
        assert after[person][1] in (now if was is None else was, None), (person, now, was)
    kept.append(keeps(db, rel, kinds))
    safe(db, rel, kept)
    return ooc


def row_regions_of(db, release_id: int, stored: list, point) -> dict:
    if point is None:
        return row_regions(db, "t", release_id, stored)
    held = {}
    for person, regions in remembered_regions(db, release_id).items():
        assert len(set(regions)) == 1, (person, regions)
        held[person] = regions[0]
    out = {}
    for person, a, b, c in db.execute(
            "SELECT sha256(decode(k.person_salt, 'hex') || convert_to(t.id::text, 'UTF8')), "
            "t.a, t.b, t.c FROM t, anon.release_secrets k WHERE k.release_id = %s",
            (release_id,)).fetchall():
        inside = [i for i, box in enumerate(stored) if in_box(box, point(a, b, c))]
        assert len(inside) == 1, (a, b, c, inside)
        out[bytes(person)] = (inside[0], held.get(person))
    return out


# -- one range QI beside text QIs: movers' classes share their released range with others' --

TEXTS = {"a": "range", "b": "set", "c": "set"}


def texts_point(a, b, c) -> dict:
    return {"a": [a], "b": [b], "c": [c]}


def few_ranges_table(db) -> None:
    """a: three integers (so most classes of every region release one of a few ranges of a),
    b and c texts, s the sensitive value."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int, b text, c text, s text)")
    db.execute(f"""INSERT INTO t
        SELECT i, 1 + (i * 7) % 3, (ARRAY['north', 'south', 'east', 'west'])[1 + (i * 5) % 4],
               'c' || ((i * 13) % 9),
               (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'ok'])[1 + (i * 11) % 5]
        FROM generate_series(1, {ROWS}) i""")


def text_movers(db, stored: list, each: int = 3) -> list:
    """(id, b, c): ``each`` people of every region given the texts of someone in the next
    region with the same a (their range of a unchanged, their class's found by it)."""
    rows = {}
    for key, a, b, c in db.execute("SELECT id, a, b, c FROM t ORDER BY id").fetchall():
        inside = [i for i, box in enumerate(stored) if in_box(box, texts_point(a, b, c))]
        assert len(inside) == 1
        rows.setdefault(inside[0], []).append((key, a, b, c))
    regions = sorted(rows)
    moves = []
    for i, region in enumerate(regions):
        there = rows[regions[(i + 1) % len(regions)]]
        for key, a, _, _ in rows[region][1:1 + each]:
            target = next((r for r in there if r[1] == a), None)
            if target is not None:
                moves.append((key, target[2], target[3]))
    return moves


def test_movers_classes_sharing_their_released_range_with_other_regions_classes(db, schema):
    """One QI released as a range (three integers) beside two text QIs: the class of a mover
    is known to the check by its released range of a only, which many classes of other regions
    release too. The refresh publishes region by region (each region's classes found once) or
    refuses with the published rows kept; a published version is safe for the analyst who kept
    both."""
    few_ranges_table(db)
    with budget(db, TINY):
        rel = stable(db, schema, "t", "shared_ranges")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    assert len(stored) >= 8
    kept = [keeps(db, rel, TEXTS)]
    moves = text_movers(db, stored)
    assert len(moves) >= 10
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET b = %s, c = %s WHERE id = %s",
                        [(b, c, key) for key, b, c in moves])
    refresh_by_regions(db, rel, stored, kept, TEXTS, texts_point)


# -- one person's moves over several refreshes --------------------------------------------

RANGES = {"a": "range", "b": "set", "c": "range"}


def test_move_move_back_leave_and_come_back_into_a_third_box(db, schema):
    """Four refreshes beyond the budget, each published region by region and judged from the
    released rows of every version: people move to another region's box with a new sensitive
    value, move back, leave, and come back into a third box with another value; each stays
    remembered by their first region, and nobody is below l or pinned across the five versions."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "moves")
    stored = boxes(db, catalog(db, rel)[0])
    rows = regions_of_rows(db, stored)
    first, second, third = sorted(rows)[:3]
    movers = [r[0] for r in rows[first][1:7]]
    home = {r[0]: r[1:] for r in rows[first]}
    kept = [keeps(db, rel, RANGES)]

    def put(target, value):
        with db.cursor() as cur:
            cur.executemany("UPDATE t SET a = %s, b = %s, c = %s, s = %s WHERE id = %s",
                            [(*target, value, key) for key in movers])

    put(rows[second][0][1:], "hiv")
    assert refresh_by_regions(db, rel, stored, kept, RANGES)["movers"] == len(movers)
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(*home[key], key) for key in movers])
    assert refresh_by_regions(db, rel, stored, kept, RANGES)["movers"] == 0
    db.execute("CREATE TABLE gone AS SELECT * FROM t WHERE id = ANY(%s)", (movers,))
    db.execute("DELETE FROM t WHERE id = ANY(%s)", (movers,))
    refresh_by_regions(db, rel, stored, kept, RANGES)
    a, b, c = rows[third][0][1:]
    db.execute("INSERT INTO t SELECT id, %s, %s, %s, 'cancer' FROM gone", (a, b, c))
    assert refresh_by_regions(db, rel, stored, kept, RANGES)["movers"] == len(movers)


# -- a partitioned source: movers cross partitions (a new tableoid) --------------------------

def test_movers_crossing_partitions_are_read_with_the_region_remembering_them(db, schema):
    """The source partitioned by b: people given another b (and another region's a and c)
    move to another partition, their rows a new tableoid and TID; the plan lists them by both,
    the refresh publishes region by region, every one still remembered by their first region,
    safe across the versions (then a second move back)."""
    db.execute("CREATE TABLE t (id int, a int, b text, c date, s text, PRIMARY KEY (id, b)) "
               "PARTITION BY LIST (b)")
    for part in ("north", "south", "east", "west"):
        db.execute(f"CREATE TABLE t_{part} PARTITION OF t FOR VALUES IN ('{part}')")
    db.execute(f"""INSERT INTO t
        SELECT i, 18 + (i * 37) % 70, (ARRAY['north', 'south', 'east', 'west'])[1 + (i * 7) % 4],
               DATE '2000-01-01' + (i * 13) % 500,
               (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'ok'])[1 + (i * 11) % 5]
        FROM generate_series(1, {ROWS}) i""")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "parts", identifiers=["id"])
    stored = boxes(db, catalog(db, rel)[0])
    rows = regions_of_rows(db, stored)
    kept = [keeps(db, rel, RANGES)]
    moves = []
    regions = sorted(rows)
    for i, region in enumerate(regions):
        there = next(r for r in rows[regions[(i + 1) % len(regions)]] if r[2] != rows[region][1][2])
        moves += [(key, *there[1:]) for key, _, b, _ in rows[region][1:3] if b != there[2]]
    assert len(moves) >= 10
    oids = dict(db.execute("SELECT id, tableoid::regclass::text FROM t").fetchall())
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(a, b, c, key) for key, a, b, c in moves])
    moved = dict(db.execute("SELECT id, tableoid::regclass::text FROM t").fetchall())
    assert all(moved[key] != oids[key] for key, *_ in moves)
    assert refresh_by_regions(db, rel, stored, kept, RANGES)["movers"] == len(moves)
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(*home[1:], home[0]) for region in regions
                         for home in rows[region][1:3]])
    assert refresh_by_regions(db, rel, stored, kept, RANGES)["movers"] == 0


# -- more movers than the plan lists -------------------------------------------------------

def test_more_movers_than_the_plan_lists_are_refused_before_anything_is_written(db, schema):
    """plan_refresh lists at most MOST_MOVERS movers (lowered to 3 in this backend's module):
    a refresh with more is refused (54000, the count in the message) and the published rows
    and state stay; with the limit back, the same refresh publishes region by region."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "many")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    rows = regions_of_rows(db, stored)
    first, second = sorted(rows)[:2]
    target = rows[second][0][1:]
    movers = [r[0] for r in rows[first][1:6]]
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(*target, key) for key in movers])
    kept = [keeps(db, rel, RANGES)]
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    state = db.execute("SELECT chunk, region, persons FROM anon.release_state "
                       "WHERE release_id = %s ORDER BY chunk", (release_id,)).fetchall()
    db.execute("DO LANGUAGE plpython3u $$\nimport plpy_anon.db.stable_regions as m\n"
               "m.MOST_MOVERS_SAVED, m.MOST_MOVERS = m.MOST_MOVERS, 3\n$$")
    try:
        with budget(db, TINY), pytest.raises(psycopg.Error) as error:
            db.execute("SELECT anon.refresh(%s)", (rel,))
    finally:
        db.execute("DO LANGUAGE plpython3u $$\nimport plpy_anon.db.stable_regions as m\n"
                   "m.MOST_MOVERS = m.MOST_MOVERS_SAVED\n$$")
    assert error.value.sqlstate == "54000", error.value
    assert f"{len(movers)} did (at most 3 are listed)" in error.value.diag.message_primary
    assert error.value.diag.message_hint
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
    assert db.execute("SELECT chunk, region, persons FROM anon.release_state "
                      "WHERE release_id = %s ORDER BY chunk", (release_id,)).fetchall() == state
    assert refresh_by_regions(db, rel, stored, kept, RANGES)["movers"] == len(movers)


# -- a mover's row updated (a new TID) while the refresh runs --------------------------------

@pytest.mark.parametrize("how", ["hot_update", "delete_insert"])
@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
def test_a_movers_row_updated_in_place_during_the_refresh(db, schema, connect, isolation, how):
    """While a refresh with movers runs (after the plan listed their TIDs), the writer commits
    an update of each mover's row that changes no value (a HOT update: a new TID, the same
    box), or deletes it and inserts it again in one transaction. READ COMMITTED: the check's reads see the new TIDs, not listed, so the movers' rows
    are read with their boxes' regions: refused (40001, the source's change), the published
    rows kept. REPEATABLE READ: the run and the check see one snapshot and publish it. Either
    way the next refresh publishes region by region, safe across the versions."""
    people(db, "t")
    db.execute("ALTER TABLE t SET (fillfactor = 50)")
    db.execute("VACUUM FULL t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "hot")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    rows = regions_of_rows(db, stored)
    regions = sorted(rows)
    moves = []
    for i, region in enumerate(regions[-4:]):
        target = rows[regions[-4:][(i + 1) % 4]][0][1:]
        moves += [(r[0], *target) for r in rows[region][1:4]]
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(a, b, c, key) for key, a, b, c in moves])
    kept = [keeps(db, rel, RANGES)]
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    running = Running(connect, schema, f"SELECT anon.refresh('{rel}')",
                      f"SET plpy_anon.build_memory = '{TINY}'", "SET plpy_anon.progress = on",
                      f"SET default_transaction_isolation = '{isolation}'")
    running.wait_for_notice("region 1 of")
    tids = dict(db.execute("SELECT id, ctid::text FROM t").fetchall())
    hot = db.execute("SELECT pg_stat_get_xact_tuples_hot_updated('t'::regclass)").fetchone()[0]
    ids = [m[0] for m in moves]
    if how == "hot_update":
        db.execute("UPDATE t SET s = s WHERE id = ANY(%s)", (ids,))
        assert db.execute("SELECT pg_stat_get_xact_tuples_hot_updated('t'::regclass)"
                          ).fetchone()[0] >= hot
    else:
        with db.transaction():
            db.execute("CREATE TEMP TABLE again ON COMMIT DROP AS "
                       "SELECT * FROM t WHERE id = ANY(%s)", (ids,))
            db.execute("DELETE FROM t WHERE id = ANY(%s)", (ids,))
            db.execute("INSERT INTO t SELECT * FROM again")
    now = dict(db.execute("SELECT id, ctid::text FROM t").fetchall())
    assert all(now[m[0]] != tids[m[0]] for m in moves)
    assert running.running(), "the refresh ended before the update"
    running.thread.join(300)
    assert not running.running()
    if isolation == "read committed":
        assert running.error is not None and running.error.sqlstate == "40001", running.error
        assert "changed while its stable release was refreshed region by region" in \
            running.error.diag.message_primary
        assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
    else:
        assert running.error is None, running.error
        kept.append(keeps(db, rel, RANGES))
        safe(db, rel, kept)
    assert refresh_by_regions(db, rel, stored, kept, RANGES)["movers"] == len(moves)


# -- a movers' class released with exactly another region's class's bounds ------------------

def classes_by_region(db, rel: str, stored: list) -> dict:
    """{region: [(a, b, c, [member ids])]}: each released class, the region whose box holds it,
    and the source's rows inside its box (Mondrian's classes of one region are disjoint)."""
    out: dict = {}
    for a, b, c in db.execute(f"SELECT DISTINCT a, b, c FROM {rel}").fetchall():
        point = {"a": [a.lower, a.upper - 1], "b": list(b),
                 "c": [c.lower, c.upper - datetime.timedelta(days=1)]}
        inside = [i for i, box in enumerate(stored) if in_box(box, point)]
        assert len(inside) == 1, (a, b, c)
        ids = [r[0] for r in db.execute(
            "SELECT id FROM t WHERE %s::int4range @> a AND b = ANY(%s) AND %s::daterange @> c "
            "ORDER BY id", (a, b, c)).fetchall()]
        out.setdefault(inside[0], []).append((a, b, c, ids))
    return out


def test_a_whole_class_moved_onto_another_regions_class(db, schema):
    """Every member of one class of a region moved onto the QIs of the rows of a class of
    another region (its extremes included): the moved group, refreshed with the region
    remembering it, is released with exactly the other class's bounds, so the released rows
    show one class of two regions' groups, which no region's check can split. Refused
    (54000, naming the regions' rows, the budget in the hint), nothing published, the state
    kept; the in-memory refresh the hint names then publishes, safe across the versions."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "same_bounds")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    classes = classes_by_region(db, rel, stored)
    pair = next((x, y) for r in sorted(classes) for x in classes[r]
                for q in sorted(classes) if q != r for y in classes[q]
                if len(x[3]) >= len(y[3]) >= 10)
    (_, _, _, movers), (_, _, _, targets) = pair
    points = db.execute("SELECT id, a, b, c FROM t WHERE id = ANY(%s) ORDER BY id",
                        (targets,)).fetchall()
    kept = [keeps(db, rel, RANGES)]
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    state = db.execute("SELECT chunk, region, persons FROM anon.release_state "
                       "WHERE release_id = %s ORDER BY chunk", (release_id,)).fetchall()
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(*points[i % len(points)][1:], key) for i, key in enumerate(movers)])
    with budget(db, TINY), pytest.raises(psycopg.Error) as error:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert error.value.sqlstate == "54000", error.value
    assert "is released with the bounds of a class of another region" in \
        error.value.diag.message_primary
    assert "plpy_anon.build_memory" in error.value.diag.message_hint
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
    assert db.execute("SELECT chunk, region, persons FROM anon.release_state "
                      "WHERE release_id = %s ORDER BY chunk", (release_id,)).fetchall() == state
    db.execute("SELECT anon.refresh(%s)", (rel,))
    kept.append(keeps(db, rel, RANGES))
    safe(db, rel, kept)


# -- cancel and a table rewrite while a region with movers runs ------------------------------

def crossed(db, stored: list, one: int, other: int, each: int = 6) -> list:
    """``each`` people of region ``one`` given the QIs of someone of region ``other`` and as
    many the other way: (id, a, b, c)."""
    rows = regions_of_rows(db, stored)
    return ([(r[0], *rows[other][0][1:]) for r in rows[one][1:1 + each]]
            + [(r[0], *rows[one][0][1:]) for r in rows[other][1:1 + each]])


def kept_of(db, rel: str) -> tuple:
    release_id = catalog(db, rel)[0]
    return (db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall(),
            db.execute("SELECT md5(string_agg(s::text, '|' ORDER BY s.chunk)) "
                       "FROM anon.release_state s WHERE release_id = %s", (release_id,)).fetchone(),
            db.execute("SELECT md5(string_agg(v::text, '|' ORDER BY v.version)) "
                       "FROM anon.release_versions v WHERE release_id = %s",
                       (release_id,)).fetchone())


@pytest.mark.parametrize("phase", ["out of core: a stable refresh of", "region 16 of",
                                   "checking region 16 of"])
def test_a_cancel_in_the_plan_or_a_region_with_movers_keeps_the_release(db, schema, connect,
                                                                        phase):
    """Movers kept by region 16 (of 32) and by the last: pg_cancel_backend once the plan is
    made, while region 16 (with its movers in and out) is fitted, and while it is checked:
    57014 within seconds, the released rows, state and versions as they were; the next
    refresh publishes region by region, safe across the versions."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "stopped")
    stored = boxes(db, catalog(db, rel)[0])
    assert len(stored) == 32
    moves = crossed(db, stored, 15, 31)
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(a, b, c, key) for key, a, b, c in moves])
    kept = [keeps(db, rel, RANGES)]
    before = kept_of(db, rel)
    running = Running(connect, schema, f"SELECT anon.refresh('{rel}')",
                      f"SET plpy_anon.build_memory = '{TINY}'", "SET plpy_anon.progress = on")
    running.wait_for_notice(phase)
    canceled = time.monotonic()
    db.execute("SELECT pg_cancel_backend(%s)", (running.pid,))
    running.thread.join(300)
    assert not running.running()
    assert running.error is not None and running.error.sqlstate == "57014", running.error
    assert running.ended - canceled < 5, running.ended - canceled
    assert kept_of(db, rel) == before
    assert refresh_by_regions(db, rel, stored, kept, RANGES)["movers"] == len(moves)


def test_a_table_rewrite_waits_for_a_refresh_with_movers(db, schema, connect):
    """The movers' TIDs stay valid from the plan to the check: CLUSTER, VACUUM FULL (which
    move every row) and VACUUM wait for the refresh's lock on the source (refused here by
    lock_timeout once it has read region 2; its transaction is held open, so the refresh
    cannot end before they try); the refresh then publishes, safe across the versions."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "rewrite")
    stored = boxes(db, catalog(db, rel)[0])
    moves = crossed(db, stored, 15, 31)
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(a, b, c, key) for key, a, b, c in moves])
    kept = [keeps(db, rel, RANGES)]
    running = Running(connect, schema, f"SELECT anon.refresh('{rel}')",
                      f"SET plpy_anon.build_memory = '{TINY}'", "SET plpy_anon.progress = on",
                      "BEGIN")
    running.wait_for_notice("region 2 of")
    other = connect()
    try:
        other.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        other.execute("SET lock_timeout = '300ms'")
        for rewrite in ("CLUSTER t USING t_pkey", "VACUUM FULL t", "VACUUM t"):
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute(rewrite)
    finally:
        other.close()
        running.thread.join(300)
        running.conn.execute("COMMIT")
    assert running.error is None, running.error
    kept.append(keeps(db, rel, RANGES))
    safe(db, rel, kept)
    assert catalog(db, rel)[1]["movers"] == len(moves)


def test_two_refreshes_with_movers_at_once(db, schema, connect):
    """Two sessions run anon.refresh of one release with movers at once beyond the budget:
    each publishes a version checked against the state the other left, or is refused (40001)
    with nothing published; at least one publishes, each known person stays remembered by one
    region, the first, and every version published is safe across the versions."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "twice")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    moves = crossed(db, stored, 15, 31)
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(a, b, c, key) for key, a, b, c in moves])
    kept = [keeps(db, rel, RANGES)]
    before = row_regions(db, "t", release_id, stored)
    runs = [Running(connect, schema, f"SELECT anon.refresh('{rel}')",
                    f"SET plpy_anon.build_memory = '{TINY}'") for _ in range(2)]
    for running in runs:
        running.thread.join(300)
        assert not running.running()
    errors = [r.error for r in runs if r.error is not None]
    assert all(e.sqlstate == "40001" for e in errors), errors
    assert len(errors) < 2
    ooc = catalog(db, rel)[1]
    assert ooc["refreshed_by_regions"] and ooc["movers"] == len(moves), ooc
    after = row_regions(db, "t", release_id, stored)
    assert {p: was for p, (_, was) in after.items()} == {p: was for p, (_, was) in before.items()}
    kept.append(keeps(db, rel, RANGES))
    safe(db, rel, kept)
    versions = db.execute("SELECT count(*) FROM anon.release_versions WHERE release_id = %s",
                          (release_id,)).fetchone()[0]
    assert versions == 1 + len(runs) - len(errors)


@pytest.mark.parametrize("identifier", ["null", "duplicate"])
def test_a_mover_whose_identifier_is_null_or_another_persons(db, schema, identifier):
    """People identified by pid (not the key) moved from region 16's box to the last's: with
    their pid set NULL, the refresh beyond the budget is refused with a clear error (no
    'Report this'), the published rows, state and versions kept; with the pid of someone who
    stays in region 16 (one person's rows in two boxes, all of them movers of region 16 but
    one), it publishes region by region or is refused so, and a published version is safe
    across the versions for the analyst who knows every row's QIs."""
    people(db, "t")
    db.execute("ALTER TABLE t ADD COLUMN pid int")
    db.execute("UPDATE t SET pid = id")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "pids", identifiers=["pid"])
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    rows = regions_of_rows(db, stored)
    there = rows[31][0]
    movers = [r[0] for r in rows[15][1:4]]
    pid = None if identifier == "null" else rows[15][0][0]
    kept = [keeps(db, rel, RANGES)]
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s, pid = %s WHERE id = %s",
                        [(*there[1:], pid, key) for key in movers])
    before = kept_of(db, rel)
    try:
        with budget(db, TINY):
            db.execute("SELECT anon.refresh(%s)", (rel,))
    except psycopg.Error as error:
        assert error.sqlstate[:2] in ("22", "23", "54"), error
        assert error.diag.message_hint and "Report this" not in error.diag.message_hint, error
        assert kept_of(db, rel) == before
        return
    assert identifier == "duplicate"
    assert catalog(db, rel)[1]["refreshed_by_regions"]
    twice = {p: r for p, r in remembered_regions(db, release_id).items() if len(set(r)) > 1}
    assert twice == {}, twice
    kept.append(keeps(db, rel, RANGES))
    safe(db, rel, kept)
    with budget(db, TINY):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    kept.append(keeps(db, rel, RANGES))
    safe(db, rel, kept)


def test_movers_of_a_release_of_text_qis_only_are_refused(db, schema):
    """Every QI released as a set: a movers' class has no range to be found by, so a refresh
    with movers beyond the budget is refused (54000, the budget in the hint), nothing
    published, and without movers it publishes region by region."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a text, b text, c text, s text)")
    db.execute(f"""INSERT INTO t
        SELECT i, 'a' || ((i * 7) % 6), (ARRAY['north', 'south', 'east', 'west'])[1 + (i * 5) % 4],
               'c' || ((i * 13) % 9),
               (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'ok'])[1 + (i * 11) % 5]
        FROM generate_series(1, {ROWS}) i""")
    kinds = {"a": "set", "b": "set", "c": "set"}
    with budget(db, TINY):
        rel = stable(db, schema, "t", "texts")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    assert len(stored) >= 8
    kept = [keeps(db, rel, kinds)]
    db.execute("UPDATE t SET s = 'ok' WHERE id % 37 = 0")
    refresh_by_regions(db, rel, stored, kept, kinds, texts_point)
    rows = {}
    for key, a, b, c in db.execute("SELECT id, a, b, c FROM t ORDER BY id").fetchall():
        inside = [i for i, box in enumerate(stored) if in_box(box, texts_point(a, b, c))]
        rows.setdefault(inside[0], []).append((key, a, b, c))
    one, other = min(rows), max(rows)
    db.execute("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
               (*rows[other][0][1:], rows[one][1][0]))
    before = kept_of(db, rel)
    with budget(db, TINY), pytest.raises(psycopg.Error) as error:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert error.value.sqlstate == "54000", error.value
    assert "no QI released as a range" in error.value.diag.message_primary
    assert "plpy_anon.build_memory" in error.value.diag.message_hint
    assert kept_of(db, rel) == before
