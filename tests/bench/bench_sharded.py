"""Issue 14 item 7: a simulation of Mondrian on a table sharded over several servers
(docs/scaling.md, "Beyond one machine").

Three local PostgreSQL 15 clusters started from this machine's binaries (PG_BIN): two shards and
a coordinator (the coordinator also holds a full copy of the table, only for the single-node
comparison). The synthetic table of bench_mondrian (6 QIs, sensitive diagnosis; default
1,000,000 rows, ``PLPY_ANON_SHARDED_ROWS``) is split by key: shard s holds ``id % 2 = s``.
The coordinator drives the shards over libpq from Python (psycopg); the protocol is what is
simulated, the transport could as well be postgres_fdw (shipped, and checked below to push the
per-region aggregate down to the shard) or Citus.

1. Top levels by aggregates. Each level costs two round trips per shard, whatever the number of
   regions: (a) one ``GROUP BY region`` query (the region of a row is a CASE over the cut tree's
   range predicates) returning per region its count, per QI min/max (ordered QIs) or count of
   distinct values (text QIs; the largest shard's count, a lower bound) and each shard's
   ``percentile_disc(0.5)``; the coordinator ranks the QIs by normalized spread like the core
   and takes as candidate median the count-weighted median of the shards' medians (approximate);
   (b) one query returning the exact counts of ``a < v`` and ``a <= v`` per region and QI. A cut
   is made only when both sides' global counts (summed over shards) are >= k -- the core's rule
   (more balanced of the two cuts, ties to ``<``, else the next QI) -- so k cannot be lost
   here. Regions stop splitting once they hold <= ``PLPY_ANON_SHARDED_LEAF_ROWS`` rows
   (default n / 16).
2. Leaves in parallel. A leaf region's rows lie on both shards (rows are sharded by key, not by
   QI), so each leaf is a shuffle target: a worker process per leaf (2 at a time: 2 cores) pulls
   the region's rows from every shard and runs the core partitioner
   (plpy_anon.core.mondrian.Mondrian, unchanged) on them. Every leaf holds >= k rows (step 1),
   and Mondrian keeps every class >= k.
3. Assembly. Class ids (leaf offset + local id) go back to the shards (id, class), each shard
   returns per class its count, min/max (ordered QIs) and distinct values (text QIs); the
   coordinator merges them (sum, min of mins, max of maxes, union) and builds the release from
   the class table and the shards' (class, diagnosis) rows.
4. Check, from the released rows: every generalized QI tuple is shared by >= k released rows,
   the rows add up to n, and on every shard every row's true values lie in its class's released
   ranges/sets (the shards hold the true values; the class table is copied to them).

Compared with the single-node ``anon.mondrian_view`` on the coordinator's full copy: wall time,
and NCP / C_DM of both partitions computed by the same function (plpy_anon.core.metrics on the
same global encoding), beside the release's own recorded figures.
"""
from __future__ import annotations

import math
import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import psycopg
from psycopg import sql

from plpy_anon.cluster import ThrowawayCluster
from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.metrics import release_metrics
from plpy_anon.core.mondrian import Mondrian
from tests.bench.bench_mondrian import SYNTHETIC, release_figures
from tests.bench.common import extension_db, markdown_table, results_dir

N_ROWS = int(os.environ.get("PLPY_ANON_SHARDED_ROWS", "1000000"))
K = 10
N_SHARDS = 2
ORDERED = ["age", "income", "visit"]          # ranges
TEXT = ["zip", "sex", "segment"]              # value sets
QIS = ["age", "zip", "sex", "segment", "income", "visit"]   # the single-node release's order
SHARD_SETTINGS = {"shared_buffers": "'256MB'", "work_mem": "'64MB'"}
TABLE_DDL = ("CREATE TABLE synthetic (id int PRIMARY KEY, age int, zip text, sex text, "
             "segment text, income int, visit date, diagnosis text)")


# ----------------------------------------------------------------------------- regions
class Region:
    """A conjunction of range predicates ``(column, op, value)``, op in <, <=, >=, >."""

    def __init__(self, conds: tuple = ()):
        self.conds = conds

    def where(self) -> sql.Composable:
        if not self.conds:
            return sql.SQL("true")
        return sql.SQL(" AND ").join(
            sql.SQL("{} {} {}").format(sql.Identifier(c), sql.SQL(op), sql.Literal(v))
            for c, op, v in self.conds)

    def split(self, col: str, v, strict: bool) -> tuple[Region, Region]:
        lo, hi = ("<", ">=") if strict else ("<=", ">")
        return Region(self.conds + ((col, lo, v),)), Region(self.conds + ((col, hi, v),))


def region_case(regions: list[Region]) -> sql.Composable:
    return sql.SQL("CASE {} END").format(sql.SQL(" ").join(
        sql.SQL("WHEN {} THEN {}").format(r.where(), sql.Literal(i)) for i, r in enumerate(regions)))


class Traffic:
    def __init__(self):
        self.round_trips = 0
        self.rows = 0          # result rows shipped between servers/processes


def on_shards(conns, query, traffic: Traffic, params=None) -> list[list[tuple]]:
    """Run the query on every shard; the per-shard result rows."""
    out = []
    for c in conns:
        rows = c.execute(query, params).fetchall()
        traffic.round_trips += 1
        traffic.rows += len(rows)
        out.append(rows)
    return out


# ----------------------------------------------------------------------------- 1. top levels
def weighted_median(values_weights: list[tuple]) -> object:
    vw = sorted((v, w) for v, w in values_weights if v is not None and w > 0)
    half, acc = sum(w for _, w in vw) / 2, 0
    for v, w in vw:
        acc += w
        if acc >= half:
            return v
    return vw[-1][0]


def global_domains(conns, traffic: Traffic) -> dict:
    """Global width of ordered QIs and domain size of text ones (aggregates, merged)."""
    parts = [sql.SQL("min({0}), max({0})").format(sql.Identifier(c)) for c in ORDERED]
    parts += [sql.SQL("count(DISTINCT {0})").format(sql.Identifier(c)) for c in TEXT]
    per_shard = on_shards(conns, sql.SQL("SELECT {} FROM synthetic").format(sql.SQL(", ").join(parts)),
                          traffic)
    dom = {}
    for i, c in enumerate(ORDERED):
        lo = min(r[0][2 * i] for r in per_shard)
        hi = max(r[0][2 * i + 1] for r in per_shard)
        dom[c] = float(_num(hi) - _num(lo))
    for j, c in enumerate(TEXT):   # exact domains would need the value lists; max is a lower bound
        dom[c] = max(r[0][2 * len(ORDERED) + j] for r in per_shard)
    return dom


def _num(v) -> float:
    return float(v.toordinal()) if hasattr(v, "toordinal") else float(v)


def top_levels(conns, leaf_rows: int, traffic: Traffic) -> tuple[list[tuple[Region, int]], list[dict]]:
    domains = global_domains(conns, traffic)
    active, leaves, levels = [Region()], [], []
    while active:
        case = region_case(active)
        stats = [sql.SQL("count(*)")]
        for c in ORDERED:
            stats.append(sql.SQL("min({0}), max({0}), percentile_disc(0.5) WITHIN GROUP (ORDER BY {0})")
                         .format(sql.Identifier(c)))
        for c in TEXT:
            stats.append(sql.SQL("count(DISTINCT {0}), percentile_disc(0.5) WITHIN GROUP (ORDER BY {0})")
                         .format(sql.Identifier(c)))
        q = sql.SQL("SELECT r, {} FROM (SELECT {} AS r, * FROM synthetic OFFSET 0) s GROUP BY r").format(
            sql.SQL(", ").join(stats), case)
        per_shard = on_shards(conns, q, traffic)
        merged: dict[int, dict] = {}
        for rows in per_shard:
            for row in rows:
                m = merged.setdefault(row[0], {"n": 0, "min": {}, "max": {}, "med": {}, "distinct": {}})
                n, pos = row[1], 2
                m["n"] += n
                for c in ORDERED:
                    lo, hi, med = row[pos:pos + 3]
                    pos += 3
                    m["min"][c] = lo if c not in m["min"] else min(m["min"][c], lo)
                    m["max"][c] = hi if c not in m["max"] else max(m["max"][c], hi)
                    m["med"].setdefault(c, []).append((med, n))
                for c in TEXT:
                    d, med = row[pos:pos + 2]
                    pos += 2
                    m["distinct"][c] = max(m["distinct"].get(c, 0), d)
                    m["med"].setdefault(c, []).append((med, n))
        # rank QIs per region by normalized spread (ties: column order), candidate medians
        candidates: dict[int, list[tuple[str, object]]] = {}
        for rid, m in merged.items():
            if m["n"] < 2 * K or m["n"] <= leaf_rows:
                continue
            spread = {}
            for c in ORDERED:
                spread[c] = (_num(m["max"][c]) - _num(m["min"][c])) / domains[c] if domains[c] else 0.0
            for c in TEXT:
                spread[c] = (m["distinct"][c] - 1) / (domains[c] - 1) if domains[c] > 1 else 0.0
            ranked = sorted((c for c in QIS if spread[c] > 0), key=lambda c: (-spread[c], QIS.index(c)))
            candidates[rid] = [(c, weighted_median(m["med"][c])) for c in ranked]
        # exact global counts of a < v and a <= v for every candidate: one more round trip,
        # grouped by region; the candidate of region r on QI c is looked up by a CASE on r
        cuts: dict[int, tuple] = {}
        if candidates:
            exprs, keys = [], []
            for c in QIS:
                with_c = {rid: dict(cands)[c] for rid, cands in candidates.items() if c in dict(cands)}
                if not with_c:
                    continue
                v_of_r = sql.SQL("CASE r {} END").format(sql.SQL(" ").join(
                    sql.SQL("WHEN {} THEN {}").format(sql.Literal(rid), sql.Literal(v))
                    for rid, v in with_c.items()))
                for strict in (True, False):
                    exprs.append(sql.SQL("count(*) FILTER (WHERE {} {} {})").format(
                        sql.Identifier(c), sql.SQL("<" if strict else "<="), v_of_r))
                    keys.append((c, strict))
            q = sql.SQL("SELECT r, {} FROM (SELECT {} AS r, * FROM synthetic OFFSET 0) s "
                        "GROUP BY r").format(sql.SQL(", ").join(exprs), case)
            by_key: dict[tuple, int] = {}
            for rows in on_shards(conns, q, traffic):
                for row in rows:
                    if row[0] not in candidates:
                        continue
                    cand = dict(candidates[row[0]])
                    for (c, strict), cnt in zip(keys, row[1:]):
                        if c in cand:
                            key = (row[0], c, cand[c], strict)
                            by_key[key] = by_key.get(key, 0) + cnt
            for rid, cands in candidates.items():
                size = merged[rid]["n"]
                for c, v in cands:
                    options = [(abs(2 * by_key[(rid, c, v, s)] - size), not s, s)
                               for s in (True, False)
                               if by_key[(rid, c, v, s)] >= K and size - by_key[(rid, c, v, s)] >= K]
                    if options:
                        strict = min(options)[2]
                        cuts[rid] = (c, v, strict, by_key[(rid, c, v, strict)], size)
                        break
        nxt = []
        for rid, region in enumerate(active):
            if rid in cuts:
                c, v, strict, _n_left, size = cuts[rid]
                left, right = region.split(c, v, strict)
                nxt.append(left)
                nxt.append(right)
            elif rid in merged:
                leaves.append((region, merged[rid]["n"]))
        levels.append({"level": len(levels), "regions": len(active), "cuts": len(cuts),
                       "balance": [round(cut[3] / cut[4], 4) for cut in cuts.values()]})
        active = nxt
    return leaves, levels


# ----------------------------------------------------------------------------- 2. leaves
def finish_leaf(dsns: list[str], where: str) -> tuple[list[np.ndarray], np.ndarray, int, int]:
    """Worker: pull the region's rows from every shard (the shuffle) and run the core Mondrian.
    Returns the ids per shard, local class ids (concatenated in shard order), classes, rows."""
    ids, cols = [], {c: [] for c in QIS}
    for dsn in dsns:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                f"SELECT id, age, zip, sex, segment, income, (visit - DATE '2000-01-01') "
                f"FROM synthetic WHERE {where}").fetchall()
        ids.append(np.array([r[0] for r in rows], dtype=np.int64))
        for j, c in enumerate(QIS):
            cols[c].extend(r[j + 1] for r in rows)
    encoded = [encode_categorical(c, cols[c]) if c in TEXT
               else encode_numeric(c, np.array(cols[c], dtype=np.float64)) for c in QIS]
    model = Mondrian(k=K).fit(encoded)
    return ids, model.labels_, model.n_classes_, sum(len(i) for i in ids)


# ----------------------------------------------------------------------------- 3. assembly
def assemble(conns, coord, leaf_results, traffic: Traffic) -> int:
    """Class ids to the shards, per-class aggregates back, release on the coordinator."""
    per_shard_ids = [[] for _ in conns]
    per_shard_cls = [[] for _ in conns]
    offset = 0
    for ids, labels, n_classes, _ in leaf_results:
        start = 0
        for s, shard_ids in enumerate(ids):
            per_shard_ids[s].append(shard_ids)
            per_shard_cls[s].append(labels[start:start + len(shard_ids)] + offset)
            start += len(shard_ids)
        offset += n_classes
    for s, c in enumerate(conns):
        c.execute("DROP TABLE IF EXISTS assign; CREATE UNLOGGED TABLE assign (id int, cls int)")
        with c.cursor().copy("COPY assign FROM STDIN") as cp:
            for i, cl in zip(np.concatenate(per_shard_ids[s]).tolist(),
                             np.concatenate(per_shard_cls[s]).tolist()):
                cp.write_row((i, cl))
        traffic.rows += sum(len(x) for x in per_shard_ids[s])
        traffic.round_trips += 1
    aggs = [sql.SQL("min({0}), max({0})").format(sql.Identifier(c)) for c in ORDERED]
    aggs += [sql.SQL("array_agg(DISTINCT {0})").format(sql.Identifier(c)) for c in TEXT]
    q = sql.SQL("SELECT cls, count(*), {} FROM synthetic JOIN assign USING (id) GROUP BY cls").format(
        sql.SQL(", ").join(aggs))
    classes: dict[int, list] = {}
    for rows in on_shards(conns, q, traffic):
        for row in rows:
            cur = classes.get(row[0])
            if cur is None:
                classes[row[0]] = list(row[1:])
                continue
            cur[0] += row[1]
            for i in range(len(ORDERED)):
                cur[1 + 2 * i] = min(cur[1 + 2 * i], row[2 + 2 * i])
                cur[2 + 2 * i] = max(cur[2 + 2 * i], row[3 + 2 * i])
            for j in range(len(TEXT)):
                p = 1 + 2 * len(ORDERED) + j
                cur[p] = sorted(set(cur[p]) | set(row[p + 1]))
    coord.execute("DROP TABLE IF EXISTS sharded_classes, sharded_rows CASCADE")
    coord.execute("CREATE TABLE sharded_classes (cls int PRIMARY KEY, n int, age_lo int, age_hi int, "
                  "income_lo int, income_hi int, visit_lo date, visit_hi date, zip text[], "
                  "sex text[], segment text[])")
    with coord.cursor().copy("COPY sharded_classes FROM STDIN") as cp:
        for cls, v in classes.items():
            cp.write_row([cls] + [sorted(x) if isinstance(x, list) else x for x in v])
    # the released rows: (class, sensitive value) from every shard, generalized by the class table
    coord.execute("CREATE TABLE sharded_rows (cls int, diagnosis text)")
    for c in conns:
        with c.cursor().copy("COPY (SELECT cls, diagnosis FROM synthetic JOIN assign USING (id) "
                             "ORDER BY random()) TO STDOUT") as src, \
                coord.cursor().copy("COPY sharded_rows FROM STDIN") as dst:
            for data in src:
                dst.write(data)
        traffic.round_trips += 1
    traffic.rows += coord.execute("SELECT count(*) FROM sharded_rows").fetchone()[0]
    coord.execute("CREATE VIEW sharded_release AS SELECT int4range(age_lo, age_hi, '[]') AS age, "
                  "zip, sex, segment, int4range(income_lo, income_hi, '[]') AS income, "
                  "daterange(visit_lo, visit_hi, '[]') AS visit, diagnosis "
                  "FROM sharded_rows JOIN sharded_classes USING (cls)")
    return len(classes)


# ----------------------------------------------------------------------------- 4. check
def check_release(conns, coord, n_rows: int) -> dict:
    """From the released rows: classes (as an attacker sees them: identical generalized tuples)
    >= k, rows add up; on the shards: every true value inside its class's released range/set."""
    smallest, n_groups, released = coord.execute(
        "SELECT min(c), count(*), sum(c) FROM (SELECT count(*) AS c FROM sharded_release "
        "GROUP BY age, zip, sex, segment, income, visit) g").fetchone()
    assert released == n_rows, f"released {released} rows of {n_rows}"
    assert smallest >= K, f"a released class has {smallest} < k = {K} rows"
    outside = 0
    rows = coord.execute("SELECT * FROM sharded_classes").fetchall()
    for c in conns:
        c.execute("DROP TABLE IF EXISTS classes; CREATE TEMP TABLE classes (cls int, n int, "
                  "age_lo int, age_hi int, income_lo int, income_hi int, visit_lo date, "
                  "visit_hi date, zip text[], sex text[], segment text[])")
        with c.cursor().copy("COPY classes FROM STDIN") as cp:
            for r in rows:
                cp.write_row(r)
        assigned, distinct_ids, total = c.execute(
            "SELECT (SELECT count(*) FROM assign), (SELECT count(DISTINCT id) FROM assign), "
            "(SELECT count(*) FROM synthetic)").fetchone()
        assert assigned == distinct_ids == total, (assigned, distinct_ids, total)
        outside += c.execute(
            "SELECT count(*) FROM synthetic t JOIN assign USING (id) JOIN classes c USING (cls) WHERE NOT ("
            "t.age BETWEEN age_lo AND age_hi AND t.income BETWEEN income_lo AND income_hi AND "
            "t.visit BETWEEN visit_lo AND visit_hi AND t.zip = ANY (c.zip) AND "
            "t.sex = ANY (c.sex) AND t.segment = ANY (c.segment))").fetchone()[0]
    assert outside == 0, f"{outside} rows outside their released ranges"
    return {"smallest_released_group": smallest, "released_groups": n_groups,
            "released_rows": released, "rows_outside_ranges": outside}


# ----------------------------------------------------------------------------- comparison
def global_encoding(coord) -> tuple[np.ndarray, list]:
    rows = coord.execute("SELECT id, age, zip, sex, segment, income, (visit - DATE '2000-01-01') "
                         "FROM synthetic ORDER BY id").fetchall()
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    enc = [encode_categorical(c, [r[j + 1] for r in rows]) if c in TEXT
           else encode_numeric(c, np.array([r[j + 1] for r in rows], dtype=np.float64))
           for j, c in enumerate(QIS)]
    return ids, enc


def postgres_fdw_pushdown(coord, shard_dsn_socket: str) -> str:
    """Does postgres_fdw ship a per-region aggregate (count + percentile_disc) to the shard?"""
    coord.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    coord.execute(sql.SQL("CREATE SERVER shard0 FOREIGN DATA WRAPPER postgres_fdw OPTIONS "
                          "(host {}, dbname 'postgres')").format(sql.Literal(shard_dsn_socket)))
    coord.execute("CREATE USER MAPPING FOR CURRENT_USER SERVER shard0 OPTIONS (user 'postgres')")
    coord.execute("CREATE SCHEMA s0; IMPORT FOREIGN SCHEMA public LIMIT TO (synthetic) "
                  "FROM SERVER shard0 INTO s0")
    plan = coord.execute("EXPLAIN (VERBOSE, COSTS OFF) SELECT age < 50 AS r, count(*), "
                         "percentile_disc(0.5) WITHIN GROUP (ORDER BY income) FROM s0.synthetic "
                         "GROUP BY 1").fetchall()
    remote = [line[0].strip() for line in plan if "Remote SQL" in line[0]]
    return remote[0] if remote else "(not pushed down)"


def main() -> None:
    leaf_rows = int(os.environ.get("PLPY_ANON_SHARDED_LEAF_ROWS", str(math.ceil(N_ROWS / 16))))
    with extension_db() as coord, ThrowawayCluster(settings=SHARD_SETTINGS) as s0, \
            ThrowawayCluster(settings=SHARD_SETTINGS) as s1:
        shards = [s0, s1]
        dsns = [s.dsn() for s in shards]
        conns = [psycopg.connect(d, autocommit=True) for d in dsns]
        # data: generated once on the coordinator, split by key
        coord.execute(SYNTHETIC.replace("generate_series(1, 1000000)", f"generate_series(1, {N_ROWS})"))
        coord.execute("VACUUM ANALYZE synthetic")
        for s, c in enumerate(conns):
            c.execute(TABLE_DDL)
            with coord.cursor().copy(f"COPY (SELECT * FROM synthetic WHERE id % {N_SHARDS} = {s}) "
                                     "TO STDOUT") as src, c.cursor().copy("COPY synthetic FROM STDIN") as dst:
                for data in src:
                    dst.write(data)
            c.execute("VACUUM ANALYZE synthetic")
        print('fdw_remote_sql = postgres_fdw_', round(time.perf_counter(), 1), flush=True)
        fdw_remote_sql = postgres_fdw_pushdown(coord, str(s0.socket_dir))

        print('# single node', round(time.perf_counter(), 1), flush=True)
        # single node
        t0 = time.perf_counter()
        release = coord.execute(
            "SELECT anon.mondrian_view('synthetic', k => %s, quasi_identifiers => %s, "
            "sensitive => ARRAY['diagnosis'])", (K, QIS)).fetchone()[0]
        single_wall = time.perf_counter() - t0
        single = release_figures(coord, release)

        print('# distributed', round(time.perf_counter(), 1), flush=True)
        # distributed
        traffic = Traffic()
        t0 = time.perf_counter()
        leaves, levels = top_levels(conns, leaf_rows, traffic)
        t_top = time.perf_counter() - t0
        print('with ProcessPoolExecutor', round(time.perf_counter(), 1), flush=True)
        with ProcessPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(finish_leaf, dsns, r.where().as_string(conns[0])) for r, _ in leaves]
            leaf_results = [f.result() for f in futures]
        t_leaves = time.perf_counter() - t0 - t_top
        shuffled = sum(r[3] for r in leaf_results)
        traffic.rows += shuffled
        traffic.round_trips += len(leaves) * len(conns)
        print('n_classes = assemble', round(time.perf_counter(), 1), flush=True)
        n_classes = assemble(conns, coord, leaf_results, traffic)
        dist_wall = time.perf_counter() - t0
        t_assemble = dist_wall - t_top - t_leaves
        t0 = time.perf_counter()
        print('check = check_release', round(time.perf_counter(), 1), flush=True)
        check = check_release(conns, coord, N_ROWS)
        t_check = time.perf_counter() - t0

        print('# NCP / C_DM', round(time.perf_counter(), 1), flush=True)
        # NCP / C_DM of both partitions with one function and one global encoding
        ids, enc = global_encoding(coord)
        pos = {int(i): p for p, i in enumerate(ids)}
        dist_labels = np.empty(len(ids), dtype=np.int64)
        offset = 0
        for leaf_ids, labels, nc, _ in leaf_results:
            flat = np.concatenate(leaf_ids)
            dist_labels[[pos[int(i)] for i in flat]] = labels + offset
            offset += nc
        dist_m = release_metrics(enc, dist_labels, K)
        single_py = Mondrian(k=K).fit(enc)
        single_m = release_metrics(enc, single_py.labels_, K)
        for c in conns:
            c.close()

    print(f"levels: {levels[:-1] and [(lv['level'], lv['regions'], lv['cuts']) for lv in levels]}")
    balances = [b for lv in levels for b in lv["balance"]]
    t1 = markdown_table(
        ["", "wall s", "classes", "smallest class", "NCP %", "C_DM"],
        [["single node anon.mondrian_view (its recorded metrics)", round(single_wall, 2),
          single["n_classes"], single["achieved_k"], round(single["ncp_percent"], 3), single["c_dm"]],
         ["single node core Mondrian on the global encoding (Python)", "-", single_m["n_classes"],
          single_m["achieved_k"], round(single_m["ncp_percent"], 3), single_m["c_dm"]],
         ["sharded simulation (2 shards + coordinator)", round(dist_wall, 2), dist_m["n_classes"],
          dist_m["achieved_k"], round(dist_m["ncp_percent"], 3), dist_m["c_dm"]]])
    t2 = markdown_table(
        ["phase", "seconds", "what moved"],
        [["top levels by aggregates", round(t_top, 2),
          (f"{len(levels)} levels, {sum(lv['cuts'] for lv in levels)} cuts, "
          f"{2 * len(levels) * N_SHARDS + N_SHARDS} round trips (<= 2 per level per shard + 1 per shard for the domains)")],
         ["leaves (shuffle + core Mondrian, 2 processes)", round(t_leaves, 2),
          (f"{len(leaves)} leaves of {min(n for _, n in leaves):,}..{max(n for _, n in leaves):,} rows; "
          f"{shuffled:,} rows shuffled (every row once)")],
         ["assembly (class ids to shards, class aggregates, released rows)", round(t_assemble, 2),
          (f"{N_ROWS:,} (id, class) pairs to shards, {n_classes:,} classes' aggregates per shard, "
          f"{N_ROWS:,} released rows to the coordinator")],
         ["check from the released rows", round(t_check, 2),
          (f"smallest released group {check['smallest_released_group']} >= k = {K}; "
          f"{check['released_rows']:,} rows = n; {check['rows_outside_ranges']} rows outside "
          "their ranges")]])
    text = (f"## Sharded Mondrian simulation: {N_ROWS:,} synthetic rows, 6 QIs, k = {K}, "
            f"{N_SHARDS} shards + coordinator (separate local clusters), leaves <= {leaf_rows:,} rows\n\n"
            f"{t1}\n\n{t2}\n\nTotal shipped between servers/processes: {traffic.rows:,} result rows "
            f"in {traffic.round_trips} round trips. Top-level cut balance (left share of the "
            f"region, 0.5 = exact median): min {min(balances):.4f}, max {max(balances):.4f}.\n\n"
            f"postgres_fdw ships the per-region aggregate to the shard: `{fdw_remote_sql}`\n")
    print(text)
    (results_dir() / "sharded.md").write_text(text)


if __name__ == "__main__":
    main()
