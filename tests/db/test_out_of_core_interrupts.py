"""A cancel or a statement_timeout inside an out-of-core build (plpy_anon.build_memory below the
table's estimate) lands within a second of the backend's CPU at every phase the build announces
(SET plpy_anon.progress = on): the top's passes, a region's read, fit and write, the check of the
released rows, and a stable creation's check region by region (reading a region's people,
matching its classes, remembering them); each pass of the top cut level by level (a source with
a foreign member, which TABLESAMPLE cannot read: counting the regions, ordering the categorical
values, the medians, counting the cuts' sides), and every phase of a source sharded over two
other servers through postgres_fdw (whose remote queries the stop cancels too: the wall time
from the stop to the end is bounded as well). Each stop is sent once the phase's notice is seen
(pg_cancel_backend), or set to fall in it (statement_timeout at the time the phase began in a
build of the same table measured in the same test, plus half its length). Each must end in a
clean 57014, with the release it was replacing unchanged (its rows, the catalog's row, its
remembered state and versions, the release schema's relations) and readable; the backend then
builds the release again. How late a stop lands is the backend's CPU between it and the end
(/proc/<pid>/stat, tests/waits.py): a loaded machine spreads it over more wall time, it does not
make it larger."""
from __future__ import annotations

import os
import threading
import time

import psycopg
import pytest
from psycopg import sql

from plpy_anon.cluster import ThrowawayCluster
from tests.db.test_interrupts import WITHIN, Running, canceled
from tests.helpers import release_schema_of
from tests.waits import cpu_seconds

#: rows of the table, and the budget of each mode that sends it out of core in 8-16 regions (a
#: stable creation's regions hold fewer rows: it keeps each person's state besides). Larger
#: regions for a measurement: PLPY_ANON_CANCEL_ROWS=1000000 PLPY_ANON_CANCEL_BUDGETS=64MB,100MB
ROWS = int(os.environ.get("PLPY_ANON_CANCEL_ROWS", "60000"))
BUDGET = dict(zip(["fresh", "stable"],
                  os.environ.get("PLPY_ANON_CANCEL_BUDGETS", "2MB,7MB").split(",")))
#: the level-by-level top (a source with a foreign member) and a sharded source: fresh builds
BUDGET.update(levels=BUDGET["fresh"], sharded=BUDGET["fresh"])
#: the table each mode releases
TABLE = {"fresh": "big", "stable": "big", "levels": "big_levels", "sharded": "big_sharded"}
#: wall seconds a stop of a sharded source's build may take to end it (its shards' queries
#: canceled too; their CPU is not the backend's)
SHARDED_WALL = 5.0

#: the phases of a fresh build (the notice each begins with), in their order: the first region's
#: read (the pass routing every region's rows: db/region_spill.py), then a region's from the
#: second region on, so that the previous region's work is behind
FRESH_PHASES = ["creating", "region 1 of {n}: reading", "region 2 of",
                "region 2 of {n}: fitting", "region 2 of {n}: writing", "checking the released rows"]
#: the phases of a stable creation's check region by region
STABLE_PHASES = ["checking region 2 of {n}: reading", "checking region 2 of {n}: matching",
                 "checking region 2 of {n}: remembering"]
#: the passes of the top cut level by level: its first level's, then its second's
LEVEL_PHASES = ["out-of-core level 1: counting", "out-of-core level 1: ordering the categorical",
                "out-of-core level 1: medians", "out-of-core level 1: counting the cuts' sides",
                "out-of-core level 2: counting", "out-of-core level 2: medians",
                "out-of-core level 2: counting the cuts' sides"]
#: a sharded source's: its top's first level's passes, a region's (read from the shards), the check
SHARDED_PHASES = LEVEL_PHASES[:4] + FRESH_PHASES[2:]


def build(schema: str, mode: str) -> str:
    stable = "l => 2, refresh_mode => 'stable'" if mode == "stable" else "refresh_mode => 'fresh'"
    return (f"SELECT anon.mondrian_view('{TABLE[mode]}', k => 5, quasi_identifiers => '{{a,b,c}}', "
            f"sensitive => '{{s}}', {stable}, release_name => 'big_{mode}', replace => true, "
            f"release_schema => '{release_schema_of(schema)}')")


def settings(mode: str) -> list[str]:
    return [f"SET plpy_anon.build_memory = '{BUDGET[mode]}'", "SET plpy_anon.progress = on",
            "SELECT anon.versions()"]          # numpy and pandas imported before the statement


def snapshot(db, schema: str, mode: str) -> tuple:
    """What a stopped replacement must leave as it was: the release's rows, its catalog row, its
    remembered state, people and versions, the release schema's relations."""
    rel_schema = release_schema_of(schema)
    digest = db.execute(sql.SQL("SELECT count(*), md5(string_agg(r::text, ';' ORDER BY r::text)) "
                                "FROM {}.{} r").format(sql.Identifier(rel_schema),
                                                       sql.Identifier(f"big_{mode}"))).fetchone()
    relations = db.execute("SELECT array_agg(relname::text ORDER BY relname) FROM pg_class "
                           "WHERE relnamespace = %s::regnamespace", (rel_schema,)).fetchone()[0]
    catalog = db.execute("SELECT release_id, created_at::text, row_count, metrics::text "
                         "FROM anon.releases WHERE release_schema = %s ORDER BY release_id",
                         (rel_schema,)).fetchall()
    ids = [row[0] for row in catalog]
    remembered = db.execute(
        "SELECT (SELECT count(*) FROM anon.release_state WHERE release_id = ANY(%(r)s)), "
        "(SELECT count(*) FROM anon.release_people WHERE release_id = ANY(%(r)s)), "
        "(SELECT count(*) FROM anon.release_versions WHERE release_id = ANY(%(r)s)), "
        "(SELECT count(*) FROM anon.releases)", {"r": ids}).fetchone()
    return digest, relations, catalog, remembered


def notice_times(running: Running) -> list[tuple[float, str]]:
    """The notices of a statement, each with its seconds since the statement started."""
    return [(at - running.started, text) for at, text in running.notices]


def began(notices, words: str) -> float | None:
    return next((at for at, text in notices if words in text), None)


def regions_of(notices) -> int:
    """The regions the build announced (its 'out of core: N regions' notice)."""
    text = next(text for _, text in notices if "out of core:" in text)
    return int(text.split("out of core:")[1].split()[0])


class TimedOut(Running):
    """A statement stopped by statement_timeout: the backend's CPU read when the timeout fell due
    (``cpu_due``), by a thread sleeping until then."""

    def __init__(self, connect, schema, statement, timeout: float, *setup):
        self.cpu_due = None
        self.timeout = timeout
        super().__init__(connect, schema, statement, *setup,
                         f"SET statement_timeout = '{int(timeout * 1000)}ms'")
        threading.Thread(target=self._read_when_due, daemon=True).start()

    def _read_when_due(self):
        time.sleep(max(0.0, self.started + self.timeout - time.monotonic()))
        if self.running():
            self.cpu_due = cpu_seconds(self.pid)


@pytest.fixture(scope="module")
def big(db, connect, module_schema):
    """The table, and a first release of each mode built over the budget: ``(schema, {mode: its
    notices timed})``."""
    db.execute(sql.SQL("""
        CREATE TABLE {}.big AS
        SELECT g AS id, (g * 7919) % 100003 AS a, (g * 104729) % 50021 AS b, (g * 31) % 997 AS c,
               (ARRAY['flu', 'hiv', 'cold', 'ok', 'gout'])[1 + g % 5] AS s
        FROM generate_series(1::int8, {}) g""").format(sql.Identifier(module_schema),
                                                        sql.Literal(ROWS)))
    db.execute(sql.SQL("ALTER TABLE {}.big ADD PRIMARY KEY (id)").format(
        sql.Identifier(module_schema)))
    db.execute(sql.SQL("ANALYZE {}.big").format(sql.Identifier(module_schema)))
    return module_schema, {mode: first_build(db, connect, module_schema, mode)
                           for mode in ("fresh", "stable")}


def first_build(db, connect, schema: str, mode: str) -> list[tuple[float, str]]:
    """The release built (or built again) over the budget, uninterrupted: its notices timed."""
    running = Running(connect, schema, build(schema, mode), *settings(mode))
    running.join()
    assert running.error is None, running.error
    notices = notice_times(running)
    assert regions_of(notices) >= 3, notices
    metrics = db.execute("SELECT metrics -> 'out_of_core' FROM anon.releases "
                         "WHERE release_schema = %s AND release_name = %s",
                         (release_schema_of(schema), f"big_{mode}")).fetchone()[0]
    assert metrics["regions"] == regions_of(notices)
    assert bool(metrics.get("stable_regions")) == (mode == "stable")
    return notices


def phases(mode: str, notices) -> list[str]:
    n = regions_of(notices)
    aimed = {"fresh": FRESH_PHASES, "stable": STABLE_PHASES, "levels": LEVEL_PHASES,
             "sharded": SHARDED_PHASES}[mode]
    return [p.format(n=n) for p in aimed]


def cancel_at(db, connect, big, mode: str, aimed: list[str], rebuilt: bool = True) -> None:
    """The release of ``mode`` built again and canceled at each phase of ``aimed``, then built
    again to the end (unless not ``rebuilt``: a sweep does it)."""
    big, notices = big[0], big[1][mode]
    before = snapshot(db, big, mode)
    landed = {}
    for phase in [p for p in phases(mode, notices) if p in aimed]:
        running = Running(connect, big, build(big, mode), *settings(mode))
        running.wait_for_notice(phase)
        stopped = time.monotonic()
        late = running.cancel(db)
        canceled(running)
        wall = running.ended - stopped
        landed[phase] = (round(late, 3), round(wall, 3), running.notices[-1][1])
        assert late < WITHIN, (phase, late, running.notices[-3:])
        assert mode != "sharded" or wall < SHARDED_WALL, (phase, wall, running.notices[-3:])
        assert not running.saw("plpy_anon: done"), "the build had ended"
        assert snapshot(db, big, mode) == before, phase
    assert len(landed) == len(aimed), (landed, aimed)
    print(f"\n{mode}: CPU and wall after the cancel, and the last notice, per phase: {landed}")
    if rebuilt:
        assert any(text.startswith("plpy_anon: done")
                   for _, text in first_build(db, connect, big, mode))


@pytest.mark.parametrize("mode", ["fresh", "stable"])
def test_a_cancel_inside_a_region_lands_within_a_second(db, connect, big, mode):
    """The fit of a fresh build's second region; a stable creation's check of its second
    region's people against the released classes."""
    aimed = "region 2 of {n}: fitting" if mode == "fresh" else "checking region 2 of {n}: matching"
    cancel_at(db, connect, big, mode, [aimed.format(n=regions_of(big[1][mode]))])


def spill_files(db) -> list[str]:
    """What the regions' pass (db/region_spill.py) left in the data directory's base/pgsql_tmp."""
    return [row[0] for row in db.execute(
        "SELECT name FROM pg_ls_dir('base/pgsql_tmp', true, false) AS name "
        "WHERE name LIKE '%plpy_anon_regions%'")]


def test_a_cancel_in_the_regions_pass_or_after_it_lands_within_a_second_and_leaves_no_file(
        db, connect, big):
    """The first region's read routes every row to its region's file in one pass over the
    source (a fresh build's; a stable creation's regions are read by the same run); a cancel
    there, or in the second region's fit (the later regions' files written), lands within a
    second and the files are removed with the run."""
    n = regions_of(big[1]["fresh"])
    for aimed in (f"region 1 of {n}: reading", f"region 2 of {n}: fitting"):
        cancel_at(db, connect, big, "fresh", [aimed], rebuilt=False)
        assert spill_files(db) == [], aimed
    assert any(text.startswith("plpy_anon: done")
               for _, text in first_build(db, connect, big[0], "fresh"))
    assert spill_files(db) == []


@pytest.mark.slow                       # a build canceled at each of 8 phases: ~1-2 min
@pytest.mark.parametrize("mode", ["fresh", "stable"])
def test_a_cancel_lands_within_a_second_at_every_phase_of_an_out_of_core_build(
        db, connect, big, mode):
    cancel_at(db, connect, big, mode, phases(mode, big[1][mode]))


@pytest.mark.slow                       # ~10 builds of 60,000 rows over the budget: ~1-2 min
@pytest.mark.parametrize("mode", ["fresh", "stable"])
def test_statement_timeout_lands_within_a_second_at_the_phases_of_an_out_of_core_build(
        db, connect, big, mode):
    time_out_at(db, connect, big, mode)


def time_out_at(db, connect, big, mode: str) -> None:
    """The release of ``mode`` built again with a timeout set to fall halfway through each phase
    as the first build timed it: on a loaded machine it may fall in a neighbouring phase (the
    last notice says which; all are reported). A build that ended within its timeout is tried
    again with the timeout shorter by a third, one whose timeout fell before the build began its
    release with it half as long again."""
    big, notices = big[0], big[1][mode]
    before = snapshot(db, big, mode)
    landed = []
    for phase in phases(mode, notices):
        start = began(notices, phase)
        following = [at for at, _ in notices if at > start]
        timeout = start + ((following[0] - start) / 2 if following else 0.05)
        for _ in range(5):
            running = TimedOut(connect, big, build(big, mode), timeout, *settings(mode))
            running.join()
            if running.error is None:           # the whole build within the timeout
                before = snapshot(db, big, mode)
                timeout *= 2 / 3
            elif not running.saw("plpy_anon: creating"):
                timeout *= 1.5
            else:
                break
        canceled(running)
        assert "statement timeout" in str(running.error)
        assert running.saw("plpy_anon: creating"), "no timeout fell in the build in five tries"
        assert not running.saw("plpy_anon: done")
        assert running.cpu_due is not None
        late = running.cpu_ended - running.cpu_due
        wall = running.ended - running.started - timeout
        landed.append((phase, round(timeout, 2), round(late, 3), round(wall, 3),
                       running.notices[-1][1]))
        assert late < WITHIN, (phase, late, running.notices[-3:])
        assert mode != "sharded" or wall < SHARDED_WALL, (phase, wall, running.notices[-3:])
        assert snapshot(db, big, mode) == before, phase
    print(f"\n{mode}: per phase aimed at, the timeout, the CPU and wall after it fell due, the "
          f"last notice: {landed}")


# ------------------------------------------------ the top cut level by level, a sharded source

def source_rows(table: str, where: str = "") -> str:
    """``big``'s rows (a categorical c, whose order the top's first level reads) into ``table``."""
    return (f"INSERT INTO {table} SELECT g, (g * 7919) % 100003, (g * 104729) % 50021, "
            f"'c' || (g * 31) % 997, (ARRAY['flu', 'hiv', 'cold', 'ok', 'gout'])[1 + g % 5] "
            f"FROM generate_series(1::int8, {ROWS}) g {where}")


COLUMNS = "id int8, a int, b int, c text, s text"


def levelled(db, connect, schema: str, mode: str) -> tuple:
    """The first build of ``mode`` (its source made), asserted cut level by level at the top."""
    notices = first_build(db, connect, schema, mode)
    levels = db.execute("SELECT metrics -> 'out_of_core' -> 'levels' FROM anon.releases "
                        "WHERE release_schema = %s AND release_name = %s",
                        (release_schema_of(schema), f"big_{mode}")).fetchone()[0]
    assert len(levels) >= 2 and not any("sample" in level for level in levels), levels
    return schema, {mode: notices}


@pytest.fixture(scope="module")
def big_levels(db, connect, module_schema):
    """``big``'s rows in a local partition of a table whose other partition is a foreign table
    (file_fdw, empty): no sample of it is taken, its top is cut level by level."""
    q = sql.Identifier(module_schema)
    server = f"{module_schema}_files"[:63]
    db.execute("CREATE EXTENSION IF NOT EXISTS file_fdw")
    db.execute(sql.SQL("CREATE SERVER {} FOREIGN DATA WRAPPER file_fdw").format(sql.Identifier(server)))
    db.execute(sql.SQL("CREATE TABLE {}.big_levels ({}) PARTITION BY RANGE (id)").format(
        q, sql.SQL(COLUMNS)))
    db.execute(sql.SQL("CREATE TABLE {}.big_levels_rows PARTITION OF {}.big_levels "
                       "FOR VALUES FROM (0) TO ({})").format(q, q, sql.Literal(ROWS + 1)))
    db.execute(sql.SQL("CREATE FOREIGN TABLE {}.big_levels_file PARTITION OF {}.big_levels "
                       "FOR VALUES FROM ({}) TO (MAXVALUE) SERVER {} OPTIONS (filename '/dev/null')")
               .format(q, q, sql.Literal(ROWS + 1), sql.Identifier(server)))
    db.execute(source_rows(f"{module_schema}.big_levels_rows"))
    db.execute(sql.SQL("ANALYZE {}.big_levels").format(q))
    try:
        yield levelled(db, connect, module_schema, "levels")
    finally:
        db.execute(sql.SQL("DROP SERVER IF EXISTS {} CASCADE").format(sql.Identifier(server)))


@pytest.fixture(scope="module")
def big_sharded(db, connect, module_schema):
    """``big``'s rows over two shards (throwaway clusters), partitions of ``big_sharded`` through
    postgres_fdw: its top cut level by level, its aggregates and regions read on the shards."""
    q = sql.Identifier(module_schema)
    servers = [f"{module_schema}_shard{i}"[:63] for i in range(2)]
    db.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    db.execute(sql.SQL("CREATE TABLE {}.big_sharded ({}) PARTITION BY LIST ((id % 2))").format(
        q, sql.SQL(COLUMNS)))
    with ThrowawayCluster() as s0, ThrowawayCluster() as s1:
        try:
            for i, (shard, server) in enumerate(zip([s0, s1], servers)):
                with psycopg.connect(shard.dsn(), autocommit=True) as conn:
                    conn.execute(f"CREATE TABLE part ({COLUMNS}, PRIMARY KEY (id))")
                    conn.execute(source_rows("part", f"WHERE g % 2 = {i}"))
                    conn.execute("ANALYZE part")
                db.execute(sql.SQL("CREATE SERVER {} FOREIGN DATA WRAPPER postgres_fdw "
                                   "OPTIONS (host {}, dbname 'postgres')").format(
                    sql.Identifier(server), sql.Literal(str(shard.socket_dir))))
                db.execute(sql.SQL("CREATE USER MAPPING FOR CURRENT_USER SERVER {} "
                                   "OPTIONS (user 'postgres')").format(sql.Identifier(server)))
                db.execute(sql.SQL("CREATE FOREIGN TABLE {}.{} PARTITION OF {}.big_sharded FOR "
                                   "VALUES IN ({}) SERVER {} OPTIONS (schema_name 'public', "
                                   "table_name 'part')").format(
                    q, sql.Identifier(f"big_sharded_{i}"), q, sql.Literal(i), sql.Identifier(server)))
            yield levelled(db, connect, module_schema, "sharded")
        finally:
            db.execute(sql.SQL("DROP TABLE IF EXISTS {}.big_sharded CASCADE").format(q))
            for server in servers:
                db.execute(sql.SQL("DROP SERVER IF EXISTS {} CASCADE").format(sql.Identifier(server)))


def test_a_cancel_in_the_top_cut_level_by_level_lands_within_a_second(db, connect, big_levels):
    """The medians of the second level (built again to the end by the slow sweep)."""
    cancel_at(db, connect, big_levels, "levels", ["out-of-core level 2: medians"], rebuilt=False)


@pytest.mark.slow                       # a build canceled at each of 7 passes: ~30 s
def test_a_cancel_lands_within_a_second_at_every_pass_of_the_top_cut_level_by_level(
        db, connect, big_levels):
    cancel_at(db, connect, big_levels, "levels", phases("levels", big_levels[1]["levels"]))


@pytest.mark.slow                       # ~7-10 builds to the top's passes: ~30 s
def test_statement_timeout_lands_within_a_second_at_the_passes_of_the_top_cut_level_by_level(
        db, connect, big_levels):
    time_out_at(db, connect, big_levels, "levels")


@pytest.mark.slow                       # two shards started, then a build canceled at each of 8 phases
def test_a_cancel_lands_within_a_second_at_every_phase_of_a_sharded_build(db, connect, big_sharded):
    cancel_at(db, connect, big_sharded, "sharded", phases("sharded", big_sharded[1]["sharded"]))


@pytest.mark.slow                       # ~8-12 builds of the sharded source
def test_statement_timeout_lands_within_a_second_at_the_phases_of_a_sharded_build(
        db, connect, big_sharded):
    time_out_at(db, connect, big_sharded, "sharded")
