"""A stable release created beyond plpy_anon.build_memory stores the box of each region of its
state (anon.release_regions, SQL 485) and is refreshed region by region beyond the budget where
the refresh's plan (stable_regions.plan_refresh) links no region: a known person stays in the
region remembering them whatever box their QIs lie in now (a mover), a joiner goes to their
box's. Checked from the released rows of every version and the source: every released class of
the creation lies inside one stored box, every row of the source in exactly one, every
remembered person in one region; k, l and the candidates an analyst intersects across versions;
the plan's rows, movers and joiners; a region below k and a cancel refuse or stop with the
published version, state, versions and boxes unchanged; a state of one region is refused
without reading the source; another custodian reads and writes no box; the boxes go with an
in-memory refresh and with the release."""
from __future__ import annotations

import datetime

import psycopg
import pytest
from psycopg import sql

from tests.db.test_custodian import custodian_role
from tests.db.test_interrupts import Running, canceled
from tests.db.test_stable_over_budget_regions import QIS, ROWS, catalog, people, stable
from tests.helpers import (
    budget,
    class_sizes,
    distinct_sensitive_per_class,
    intersected_below_l,
    intersected_candidates,
    keep_released_version,
)

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


def remembered_regions(db, release_id: int) -> dict:
    """Each person the state remembers (published or held back) -> the regions whose state rows
    hold them."""
    out: dict = {}
    for column in ("persons", "waiting_persons"):
        for person, region in db.execute(
                f"SELECT substr(s.{column}, 32 * (g - 1) + 1, 32), s.region "
                f"FROM anon.release_state s, generate_series(1, octet_length(s.{column}) / 32) g "
                "WHERE s.release_id = %s", (release_id,)).fetchall():
            out.setdefault(bytes(person), []).append(region)
    return out


def row_regions(db, table: str, release_id: int, stored: list) -> dict:
    """Each person's hash -> (the box their row lies in now, the region of the state's row that
    remembers them, published or held back, None for someone new), from the source and the
    state; refuses a person remembered in several regions."""
    held = {}
    for person, regions in remembered_regions(db, release_id).items():
        assert len(set(regions)) == 1, (person, regions)
        held[person] = regions[0]
    out = {}
    for person, a, b, c in db.execute(
            f"SELECT sha256(decode(k.person_salt, 'hex') || convert_to(t.id::text, 'UTF8')), "
            f"t.a, t.b, t.c FROM {table} t, anon.release_secrets k WHERE k.release_id = %s",
            (release_id,)).fetchall():
        inside = [i for i, box in enumerate(stored) if in_box(box, {"a": [a], "b": [b], "c": [c]})]
        assert len(inside) == 1, (a, b, c, inside)        # the boxes cover the domain, disjoint
        out[bytes(person)] = (inside[0], held.get(person))
    return out


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
    # and over the budget that state is refused as any other stable refresh
    error = refused(db, rel)
    assert "region by region" in error.diag.message_detail
    # dropped: the boxes of a release created over the budget go with it
    with budget(db, TINY):
        again = stable(db, schema, "t", "dropped")
    again_id = catalog(db, again)[0]
    assert boxes(db, again_id)
    db.execute("SELECT anon.drop_release(%s)", (again,))
    assert boxes(db, again_id) == []


def source_reads(db, table: str) -> tuple:
    """Scans of ``table`` and rows they returned in this transaction (this backend's own counts,
    before they reach pg_stat_user_tables)."""
    return db.execute("SELECT pg_stat_get_xact_numscans(%s::regclass), "
                      "pg_stat_get_xact_tuples_returned(%s::regclass), "
                      "pg_stat_get_xact_tuples_fetched(%s::regclass)",
                      (table, table, table)).fetchone()


def state_rows(db, release_id: int) -> list:
    return db.execute("SELECT * FROM anon.release_state WHERE release_id = %s ORDER BY chunk",
                      (release_id,)).fetchall()


def last_error(db, rel: str):
    return db.execute("SELECT last_error FROM anon.releases WHERE format('%%I.%%I', "
                      "release_schema, release_name) = %s", (rel,)).fetchone()[0]


def test_a_refusal_is_recorded_and_keeps_the_published_version(db, schema):
    """A refresh beyond the budget refused (a region left below k: 54000) after the plan's one
    pass over the source and before anything is written (released rows, state, versions and
    boxes as they were), recorded in last_error and anon.refresh_history; the same refresh
    within the budget runs in memory."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "moved")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    db.execute("DELETE FROM t WHERE id % 25 = 0")
    db.execute("UPDATE t SET a = 105 - a WHERE id % 97 = 0")
    hashes = [p for p, (now, before) in row_regions(db, "t", release_id, stored).items()
              if before == 2]
    db.execute("DELETE FROM t t USING anon.release_secrets k WHERE k.release_id = %s AND "
               "sha256(decode(k.person_salt, 'hex') || convert_to(t.id::text, 'UTF8')) = ANY(%s)",
               (release_id, hashes))
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    state = state_rows(db, release_id)
    versions = db.execute("SELECT * FROM anon.release_versions WHERE release_id = %s",
                          (release_id,)).fetchall()
    error = refused(db, rel)
    assert "hold fewer than k = 10 rows now (region 2: " in error.diag.message_primary
    assert "SET plpy_anon.build_memory" in error.diag.message_hint
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
    assert state_rows(db, release_id) == state
    assert db.execute("SELECT * FROM anon.release_versions WHERE release_id = %s",
                      (release_id,)).fetchall() == versions
    assert boxes(db, release_id) == stored
    assert "fewer than k" in last_error(db, rel)
    assert db.execute("SELECT succeeded, sqlstate, error LIKE '%%fewer than k%%' FROM "
                      "anon.refresh_history WHERE release_id = %s ORDER BY started_at DESC "
                      "LIMIT 1", (release_id,)).fetchone() == (False, "54000", True)
    db.execute("SELECT anon.refresh(%s)", (rel,))
    assert last_error(db, rel) is None
    guarantees_hold(db, rel)
    assert catalog(db, rel)[2]["below_l"] == 0


def test_the_refusal_of_a_state_of_one_region_reads_no_row_of_the_source(db, schema):
    """A stable release whose state is one region (refreshed in memory since its creation
    region by region: no boxes) is refused beyond the budget before anything is read."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "unread")
    release_id = catalog(db, rel)[0]
    db.execute("UPDATE t SET s = 'ok' WHERE id % 11 = 0")
    db.execute("SELECT anon.refresh(%s)", (rel,))           # in memory: the boxes go
    assert boxes(db, release_id) == []
    # leavers, joiners and QI moves: a refresh has work to do
    db.execute("DELETE FROM t WHERE id % 25 = 0")
    db.execute(f"INSERT INTO t SELECT i, 18 + (i * 37) % 70, 'east', DATE '2000-01-01' + i % 500, "
               f"'flu' FROM generate_series({ROWS + 1}, {ROWS + 200}) i")
    db.execute("UPDATE t SET a = 18 + (a + 35) % 70 WHERE id % 301 = 0")
    # a large table has statistics: its size is the planner's estimate (one never analyzed is
    # counted first, as any build beyond the budget counts it: out_of_core.sized)
    db.execute("ANALYZE t")
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    with budget(db, TINY), db.transaction():
        start = source_reads(db, "t")
        with pytest.raises(psycopg.Error) as error, db.transaction():
            db.execute("SELECT anon.refresh(%s)", (rel,))
        assert error.value.sqlstate == "54000"
        assert source_reads(db, "t") == start
    assert "refresh_mode => 'stable' refreshes a release holding every row" in \
        error.value.diag.message_primary
    assert "region by region" in error.value.diag.message_detail
    assert "SET plpy_anon.build_memory" in error.value.diag.message_hint
    # nothing half-built: the published version is read as it was
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
    guarantees_hold(db, rel)
    # the counts see a refresh that reads the source: the same one within the budget scans it
    with db.transaction():
        start = source_reads(db, "t")
        db.execute("SELECT anon.refresh(%s)", (rel,))
        after = source_reads(db, "t")
    assert after[0] > start[0] and after[1] + after[2] - start[1] - start[2] >= ROWS
    guarantees_hold(db, rel)
    assert catalog(db, rel)[2]["below_l"] == 0


def test_another_custodian_reads_no_box_of_a_stable_release(db, connect):
    """The owner (no superuser) refreshes its release region by region; another custodian
    reads and writes none of its boxes."""
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
            # the owner, no superuser, refreshes it region by region
            conn.execute(sql.SQL("DELETE FROM {} WHERE id % 23 = 0").format(table))
            conn.execute(sql.SQL("UPDATE {} SET s = 'ok' WHERE id % 31 = 0").format(table))
            with budget(conn, TINY):
                conn.execute("SELECT anon.refresh(%s)", (rel,))
            assert catalog(conn, rel)[1]["refreshed_by_regions"]
            assert conn.execute("SELECT count(*) FROM anon.readable_release_regions "
                                "WHERE release_id = %s", (release_id,)).fetchone()[0] == shown
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



def planned(db, schema: str, table: str, release_id: int) -> dict:
    """stable_regions.plan_refresh of a release, run in the backend as the superuser (the salt
    read from anon.release_secrets as with_secrets reads it)."""
    seen = []
    db.add_notice_handler(lambda notice: seen.append(notice.message_primary))
    db.execute("SELECT * FROM anon.versions()")          # the backend's environment is active
    db.execute(f"""DO LANGUAGE plpython3u $$
import json
from plpy_anon.db import columns, guards, out_of_core, release_rows, stable_regions
from plpy_anon.db.sqltext import jsonb
release = release_rows.by_id(plpy, {release_id})
salt = plpy.execute("SELECT person_salt FROM anon.release_secrets "
                    "WHERE release_id = {release_id}")[0]["person_salt"]
release = {{**release, "parameters": json.dumps({{**jsonb(release["parameters"]),
                                                 "person_salt": salt}})}}
tbl = guards.table(plpy, '{schema}.{table}')
cols = {{c.name: c for c in columns.table_columns(plpy, tbl)}}
src = out_of_core.Source(plpy, tbl, [cols[n] for n in {QIS!r}], [],
                         out_of_core.source_members(plpy, tbl))
got = stable_regions.plan_refresh(plpy, release, src, [cols["id"]])
plpy.notice(json.dumps({{"rows": got.rows, "movers": got.movers, "joiners": got.joiners,
                         "waiting": got.waiting, "spread": got.spread_groups,
                         "everything": got.everything, "groups": got.groups.groups,
                         "group_rows": got.groups.group_rows, "rounds": got.groups.rounds,
                         "moved": [[m.kept, m.box] for m in got.moved]}}))
$$""")
    import json
    return json.loads(seen[-1])


def test_the_refresh_plan_keeps_movers_in_their_regions(db, schema):
    """The plan of a refresh beyond the budget (stable_regions.plan_refresh, one pass in SQL)
    against the source, the stored boxes and the state read here: each known person's row
    counted in the region remembering them, each joiner's in its box's, movers and joiners as
    the state says, and no region linked to another by movers."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "planned")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    assert len(stored) > 2
    # nobody moved: every region its own group
    got = planned(db, schema, "t", release_id)
    assert got["groups"] == list(range(len(stored))) and got["movers"] == got["joiners"] == 0
    # churn: leavers, joiners, changed sensitive values, a few movers across boxes
    db.execute("DELETE FROM t WHERE id % 25 = 0")
    db.execute(f"INSERT INTO t SELECT i, 18 + (i * 37) % 70, 'east', DATE '2000-01-01' + i % 500, "
               f"'flu' FROM generate_series({ROWS + 1}, {ROWS + 200}) i")
    db.execute("UPDATE t SET s = 'ok' WHERE id % 11 = 0")
    db.execute("UPDATE t SET a = 105 - a WHERE id % 97 = 0")
    regions = row_regions(db, "t", release_id, stored)
    got = planned(db, schema, "t", release_id)
    assert got["everything"] is None and got["waiting"] == got["spread"] == 0
    now = [0] * len(stored)
    for region, _ in regions.values():
        now[region] += 1
    moved = [(before, region) for region, before in regions.values()
             if before is not None and before != region]
    assert got["movers"] == len(moved) == len(got["moved"]) > 0
    assert sorted(got["moved"]) == sorted([before, region] for before, region in moved)
    assert got["joiners"] == sum(before is None for _, before in regions.values()) == 200
    # each region reads its remembered people wherever they lie, and its box's joiners
    reads = [0] * len(stored)
    for region, before in regions.values():
        reads[region if before is None else before] += 1
    assert got["rows"] == reads != now
    assert got["groups"] == list(range(len(stored)))
    # the plan reads and writes nothing of the release
    assert boxes(db, release_id) == stored
    guarantees_hold(db, rel)


def analyst_keeps(db, rel: str, table: str = "t") -> dict:
    return keep_released_version(db, rel, table, "id", {"a": "range", "b": "set", "c": "range"}, "s")


def churn(db, step: int) -> None:
    """Leavers, joiners (new ids, and people who left earlier back with their QIs) and changed
    sensitive values, no QI moved: every row stays in its box."""
    db.execute(f"CREATE TABLE IF NOT EXISTS gone_{step} AS SELECT * FROM t WHERE id % 23 = {step}")
    db.execute(f"DELETE FROM t WHERE id % 23 = {step}")
    if step:
        db.execute(f"INSERT INTO t SELECT * FROM gone_{step - 1}")
    db.execute(f"""INSERT INTO t SELECT i, 18 + (i * 37) % 70,
                       (ARRAY['north', 'south', 'east', 'west'])[1 + (i * 7) % 4],
                       DATE '2000-01-01' + (i * 13) % 500,
                       (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'ok'])[1 + (i * 3) % 5]
                   FROM generate_series({ROWS + 1 + 100 * step}, {ROWS + 100 * (step + 1)}) i""")
    db.execute(f"UPDATE t SET s = (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'ok'])[1 + (id + {step}) % 5] "
               f"WHERE id % 31 = {step}")


def test_a_refresh_beyond_the_budget_runs_region_by_region_safe_across_versions(db, schema):
    """Three refreshes beyond the budget with churn (leavers, joiners, comebacks, changed
    sensitive values; nobody leaves their box), each region by region: checked from the released
    rows of every version, k, l and the candidates an analyst who kept every version intersects
    (none below l), the state still written region by region, the boxes kept."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "by_regions")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    assert len(stored) > 2
    kept = [analyst_keeps(db, rel)]
    for step in range(3):
        churn(db, step)
        regions = row_regions(db, "t", release_id, stored)
        assert all(before in (None, now) for now, before in regions.values())
        with budget(db, TINY):
            db.execute("SELECT anon.refresh(%s)", (rel,))
        _, ooc, across = catalog(db, rel)
        assert ooc["refreshed_by_regions"] and ooc["regions"] == len(stored)
        guarantees_hold(db, rel)
        kept.append(analyst_keeps(db, rel))
        assert intersected_below_l(kept, 2) == {}
        assert across["below_l"] == 0 and across["regions"] == len(stored)
        assert across["versions_compared"] == step + 1
        # the check's fewest candidates are the analyst's, for the people in the table now
        fewest = min(len(v) for p, v in intersected_candidates(kept).items()
                     if p in kept[-1]["people"])
        assert across["fewest_candidates"] == fewest
        # the state is still one run of rows a region, and the boxes stay
        assert db.execute("SELECT count(DISTINCT region) FROM anon.release_state "
                          "WHERE release_id = %s", (release_id,)).fetchone()[0] == len(stored)
        assert boxes(db, release_id) == stored
        # every person remembered in their box's region, absent ones kept
        regions = row_regions(db, "t", release_id, stored)
        assert all(now == before for now, before in regions.values())
    # the versions stored are the refreshes'
    assert db.execute("SELECT count(*) FROM anon.release_versions WHERE release_id = %s",
                      (release_id,)).fetchone()[0] == 4
    # within the budget the same release refreshes in memory, and agrees
    db.execute("SELECT anon.refresh(%s)", (rel,))
    guarantees_hold(db, rel)
    kept.append(analyst_keeps(db, rel))
    assert intersected_below_l(kept, 2) == {}


def test_a_cancel_mid_refresh_keeps_the_published_version(db, connect, schema):
    """A refresh region by region canceled while it fits its second region, and while it
    remembers its second region's people (the first region's new state rows written): 57014,
    the released rows, state, versions and boxes as they were; the refresh then runs."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "canceled")
    release_id = catalog(db, rel)[0]
    churn(db, 0)

    def snapshot():
        return (db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall(),
                state_rows(db, release_id),
                db.execute("SELECT * FROM anon.release_versions WHERE release_id = %s",
                           (release_id,)).fetchall(), boxes(db, release_id))
    before = snapshot()
    n = len(before[3])
    for phase in (f"region 2 of {n}: fitting", f"checking region 2 of {n}: remembering"):
        running = Running(connect, schema, f"SELECT anon.refresh('{rel}')",
                          f"SET plpy_anon.build_memory = '{TINY}'", "SET plpy_anon.progress = on",
                          "SELECT anon.versions()")
        running.wait_for_notice(phase)
        running.cancel(db)
        canceled(running)
        assert snapshot() == before, phase
    with budget(db, TINY):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert catalog(db, rel)[1]["refreshed_by_regions"]
    guarantees_hold(db, rel)


def test_a_region_left_below_k_refuses_the_refresh_region_by_region(db, schema):
    """Everyone of one region left: its run as a release of its own cannot hold k, so the
    refresh is refused (54000) before anything is written."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "emptied")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    hashes = [p for p, (now, _) in row_regions(db, "t", release_id, stored).items() if now == 3]
    db.execute("DELETE FROM t t USING anon.release_secrets k WHERE k.release_id = %s AND "
               "sha256(decode(k.person_salt, 'hex') || convert_to(t.id::text, 'UTF8')) = ANY(%s)",
               (release_id, hashes))
    state = state_rows(db, release_id)
    error = refused(db, rel)
    assert "hold fewer than k = 10 rows now (region 3: 0)" in error.diag.message_primary
    assert state_rows(db, release_id) == state
    guarantees_hold(db, rel)


def test_a_text_identifier_is_hashed_in_sql_as_the_run_hashes_it(db, schema):
    """People followed by a text key (with a space, an accent, a quote): the plan's SQL hashes
    them as the run does (each region's run finds as many remembered people as the plan
    counted, else refused), so the refresh runs region by region."""
    people(db, "t")
    db.execute("CREATE TABLE named AS SELECT 'pé ''' || id AS pid, a, b, c, s FROM t")
    db.execute("ALTER TABLE named ADD PRIMARY KEY (pid)")
    with budget(db, TINY):
        rel = stable(db, schema, "named", "named", identifiers=["pid"])
    db.execute("DELETE FROM named WHERE right(pid, 1) = '7'")
    with budget(db, TINY):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    _, ooc, across = catalog(db, rel)
    assert ooc["refreshed_by_regions"] and ooc["joiners"] == 0
    assert across["seen_before"] == ROWS - ROWS // 10 and across["below_l"] == 0
    guarantees_hold(db, rel)


def test_a_person_two_regions_remember_is_refused(db, schema):
    """A state row copied into another region (a release's owner may write its own rows of
    anon.release_state): its people are remembered by two regions, whose runs would each take
    them; refused (54000) by the plan before anything is written, the published rows kept."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "twice")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    chunks = db.execute("SELECT count(*) FROM anon.release_state WHERE release_id = %s",
                        (release_id,)).fetchone()[0]
    copied = db.execute("SELECT octet_length(persons) / 32 FROM anon.release_state WHERE "
                        "release_id = %s AND region = 0 ORDER BY chunk LIMIT 1",
                        (release_id,)).fetchone()[0]
    db.execute("UPDATE anon.release_state SET chunks = %s WHERE release_id = %s",
               (chunks + 1, release_id))
    db.execute("INSERT INTO anon.release_state SELECT (jsonb_populate_record(s, "
               "jsonb_build_object('chunk', %s, 'region', %s))).* FROM anon.release_state s "
               "WHERE release_id = %s AND region = 0 ORDER BY chunk LIMIT 1",
               (chunks, len(stored) - 1, release_id))
    twice = {p for p, r in remembered_regions(db, release_id).items() if len(set(r)) > 1}
    assert 0 < len(twice) <= copied
    # the rows of the source whose people two regions remember
    present = sum(1 for p in person_hashes(db, release_id) if p in twice)
    assert present > 0
    error = refused(db, rel)
    assert f"{present:,} rows' people are remembered by two regions" in error.diag.message_primary
    assert "would have to be refreshed together" in error.diag.message_primary


def person_hashes(db, release_id: int) -> list:
    """The hash of each row's person in ``t``."""
    return [bytes(p) for (p,) in db.execute(
        "SELECT sha256(decode(k.person_salt, 'hex') || convert_to(t.id::text, 'UTF8')) "
        "FROM t, anon.release_secrets k WHERE k.release_id = %s", (release_id,)).fetchall()]
