"""The least cost of what the stable refresh does beyond a fresh one, measured beside both in the
same run: how close to the fresh refresh (target: stable <= 1.5x fresh) any stable mode can get.

On one of bench_stable's tables (PLPY_ANON_FLOOR_TABLE): "synth" (the default: 6 QIs plus an id
primary key, PLPY_ANON_STABLE_ROWS rows, default "1000000") or "people" (zip and birth date as
ranges, sex, a diagnosis, an id primary key; PLPY_ANON_STABLE_PEOPLE rows, default 32,561); k = 10,
l = 2; PLPY_ANON_STABLE_CHURN of the people leave and as many join, default 0.01. It times:

1. a plain copy of the table and the fresh refresh (``anon.refresh`` of a release made with
   ``refresh_mode => 'fresh'``);
2. the stable refresh of the same table after the same churn, and its phases
   (``anon.refresh_history.phases``); PLPY_ANON_FLOOR_REFRESHES rounds (default 1) of churn and
   both refreshes, the best of each counted;
3. inside the backend (DO blocks calling the libraries the extension calls), each step the
   stable mode cannot skip, by the cheapest primitive available, best of PLPY_ANON_FLOOR_REPEAT
   runs (default 3):

   * ``read id``: the extra time of the reader (``reader.read_columns``) reading the id beside
     the QIs and the sensitive column, against the same read without it;
   * ``hash``: the salted SHA-256 of every identifier's text, as the run hashes them
     (``core.person_hashes``: the compiled kernels, hashlib where numba is absent or not yet
     loaded for a table below 50,000 rows), by the compiled kernels whatever the rows, and by
     PostgreSQL (``sha256(salt || convert_to(id::text, 'UTF8'))`` aggregated into one bytea,
     less the same read of the ids alone); the cheapest counts, all are printed, and all
     are checked to give the same digests;
   * ``state write`` / ``state read``: the stable release's state (its bytes in
     anon.release_state) as incompressible bytea, in one row and in as many rows as the release's
     state has; the cheaper layout counts; the write timed from the client, its commit included;
   * ``classes``: the released classes read in one statement (a GROUP BY over the released view's
     QI columns, each range's bounds and each set, and array_agg of the sensitive value; and,
     for a compact release, its storage's rows, one a class), packed into bytea and decoded in
     numpy / pyarrow; the cheaper source counts, both are printed with what they found;
   * ``locate``: every person matched to the classes holding them (the QIs coded as ranks and
     codes, then ``core.containment.contained``, the compiled kernel, without the run's hints);
   * ``intersect``: each person's candidates as a bitmask: the OR of the masks of the classes
     holding them (from their pairs), AND what the versions before left them (here every value),
     and the people left below l counted;
   * ``match``: the people's hashes matched to a state's sorted hashes (the people sorted by
     their first 8 bytes, searchsorted, the whole hash compared).

It prints each primitive's seconds, their sum (``classes`` and ``locate`` replaced by the
refresh's own ``check_classes`` phase where that is cheaper: it locates people with the run's
hints), and the floor ratio (fresh + sum) / fresh beside the target 1.5x. The grouping
(``stable_groups``, ``stable_multisets``) and the difference check have no primitive here: the
floor leaves them out, so it is a lower bound; both releases are verified from their rows (smallest class >= k, fewest
sensitive values in a class >= l). Not a test: it asserts no speed.

PLPY_ANON_FLOOR_CLOCK=cpu times everything by the backend's CPU seconds (time.process_time inside
it: the primitives, each create and refresh, the state's write without its commit; the stable
refresh's phases with plpy_anon.db.timing's clock read from time.process_time for that call)
instead of the wall clock: a loaded machine stretches them least, and at 32,561 rows a wall clock
at load 7 is mostly waiting.
"""
from __future__ import annotations

import json
import os
import time

from tests.bench.bench_stable import TARGET, K, L, churn, load, state_size, verified
from tests.bench.common import copy_seconds, extension_db, markdown_table, results_dir

ROWS = int(os.environ.get("PLPY_ANON_STABLE_ROWS", "1000000"))
PEOPLE_ROWS = int(os.environ.get("PLPY_ANON_STABLE_PEOPLE", "32561"))
REPEAT = int(os.environ.get("PLPY_ANON_FLOOR_REPEAT", "3"))
REFRESHES = int(os.environ.get("PLPY_ANON_FLOOR_REFRESHES", "1"))
TABLE = os.environ.get("PLPY_ANON_FLOOR_TABLE", "synth")
#: "wall" (the wall clock's seconds) or "cpu" (the backend's CPU seconds)
CLOCK = os.environ.get("PLPY_ANON_FLOOR_CLOCK", "wall")
QIS = ["a_int", "b_int", "c_int", "d_txt", "e_txt", "f_txt"]
RANGES, SETS, SENSITIVE = QIS[:3], QIS[3:], "s_txt"
#: each table's QIs (ranges, then value sets), sensitive column and rows; a date ranged as the
#: reader reads it, in days since 2000-01-01
TABLES = {
    "synth": {"ranges": RANGES, "sets": SETS, "sensitive": SENSITIVE, "rows": ROWS, "dates": []},
    "people": {"ranges": ["zip", "birth_date"], "sets": ["sex"], "sensitive": "diagnosis",
               "rows": PEOPLE_ROWS, "dates": ["birth_date"]},
}
#: a salt as the stable mode keeps one (32 bytes, hexadecimal)
SALT = "5f" * 32


def backend(conn, code: str) -> dict:
    """Run ``code`` (Python) in the connection's backend as a DO block; it hands its figures
    back through ``report(dict)`` (a notice of JSON)."""
    notices = []

    def keep(diagnostic):           # its text: the diagnostic is freed after the handler returns
        notices.append(diagnostic.message_primary or "")

    body = ("import json, time\n"
            "def report(figures):\n    plpy.notice('floor ' + json.dumps(figures))\n" + code)
    conn.add_notice_handler(keep)
    try:
        conn.execute(f"DO $do$\n{body}\n$do$ LANGUAGE plpython3u")
    finally:
        conn.remove_notice_handler(keep)
    found = [m for m in notices if m.startswith("floor ")]
    return json.loads(found[-1][len("floor "):]) if found else {}


#: the reader with and without the id (as the stable run reads an integer id: as numbers);
#: the read with it kept in GD for the primitives after
READ = """
from plpy_anon.db import columns, guards, reader
tbl = guards.table(plpy, GD.get("floor_table", "synth"))
cols = {c.name: c for c in columns.table_columns(plpy, tbl)}
numeric = [cols[c] for c in %(ranges)r]
categorical = [cols[c] for c in %(sets)r + [%(sensitive)r]]
best = {"without": float("inf"), "with": float("inf")}
for _ in range(%(repeat)d):
    for label, extra in (("without", []), ("with", [cols["id"]])):
        t0 = time.perf_counter()
        data = reader.read_columns(plpy, tbl, numeric + extra, categorical, located=False,
                                   exact=True)
        best[label] = min(best[label], time.perf_counter() - t0)
GD["floor_data"] = data
report(best)
"""

#: the run's hashes (hashlib below the rows that load numba), and the compiled kernels' (loaded
#: before their timing), checked equal
HASH_PYTHON = """
from plpy_anon.core import person_hashes
ids = GD["floor_data"].columns["id"].values
best = {"run": float("inf"), "compiled": float("inf")}
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    hashes = person_hashes.salted_sha256_integers(bytes.fromhex(%(salt)r), ids)
    best["run"] = min(best["run"], time.perf_counter() - t0)
person_hashes.salted_sha256_integers(bytes.fromhex(%(salt)r), ids[:10], "numba")
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    compiled = person_hashes.salted_sha256_integers(bytes.fromhex(%(salt)r), ids, "numba")
    best["compiled"] = min(best["compiled"], time.perf_counter() - t0)
assert compiled.tobytes() == hashes.tobytes()
GD["floor_hashes"] = hashes
report(best)
"""

#: PostgreSQL's sha256 over every id's text, aggregated as the reader aggregates (one bytea),
#: against the same aggregate of the ids alone; then checked against hashlib's digests
HASH_SQL = """
import numpy as np
from plpy_anon.core import person_hashes
ids_only = plpy.prepare("SELECT pg_catalog.string_agg(pg_catalog.int8send(id::int8), ''::bytea) AS i "
                        "FROM %(table)s")
hashed = plpy.prepare("SELECT pg_catalog.string_agg(pg_catalog.sha256(pg_catalog.decode($1, 'hex') "
                      "|| pg_catalog.convert_to(id::text, 'UTF8')), ''::bytea) AS h FROM %(table)s",
                      ["text"])
best = {"ids": float("inf"), "sha256": float("inf")}
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    plpy.execute(ids_only)
    best["ids"] = min(best["ids"], time.perf_counter() - t0)
    t0 = time.perf_counter()
    digests = plpy.execute(hashed, [%(salt)r])[0]["h"]
    best["sha256"] = min(best["sha256"], time.perf_counter() - t0)
both = plpy.execute("SELECT pg_catalog.string_agg(pg_catalog.int8send(id::int8), ''::bytea) AS i, "
                    "pg_catalog.string_agg(pg_catalog.sha256(pg_catalog.decode('%(salt)s', 'hex') "
                    "|| pg_catalog.convert_to(id::text, 'UTF8')), ''::bytea) AS h FROM %(table)s")[0]
ids = np.frombuffer(both["i"], dtype=">i8").astype(np.int64)
same = person_hashes.salted_sha256_integers(bytes.fromhex(%(salt)r), ids).tobytes() == both["h"]
best["same_digests"] = bool(same)
report(best)
"""

#: a state of ``size`` bytes, in ``rows`` rows, written (a statement a row, bound bytea) and read
STATE_BYTES = """
import os
GD["floor_state"] = os.urandom(%(size)d)
"""
STATE_WRITE = """
blob, rows = GD["floor_state"], %(rows)d
step = -(-len(blob) // rows)
plpy.execute("DELETE FROM floor_state")
insert = plpy.prepare("INSERT INTO floor_state VALUES ($1, $2)", ["int4", "bytea"])
for chunk in range(rows):
    plpy.execute(insert, [chunk, blob[chunk * step:(chunk + 1) * step]])
"""
STATE_READ = """
best = float("inf")
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    cursor = plpy.cursor("SELECT blob FROM floor_state ORDER BY chunk")
    read = [row["blob"] for row in cursor]
    best = min(best, time.perf_counter() - t0)
assert b"".join(read) == GD["floor_state"]
report({"read": best})
"""

#: the released classes in one statement: each range QI's bounds, each set QI's elements and the
#: sensitive values (joined, ended by 0x01) packed in class order; decoded in numpy / pyarrow
CLASSES = """
import numpy as np
from plpy_anon.db import class_counts, release_rows
from plpy_anon.db.republication import _texts_ending
ranges, sets, sensitive, dates = %(ranges)r, %(sets)r, %(sensitive)r, %(dates)r
grouped = (", ".join(ranges + sets) + ", pg_catalog.array_agg(" + sensitive + ") AS vals")
parts = ["pg_catalog.count(*) AS n"]
for q in ranges:
    # a date's bound as the reader reads a date: days since 2000-01-01
    days = " - DATE '2000-01-01'" if q in dates else ""
    parts.append(f"pg_catalog.string_agg(pg_catalog.int8send((pg_catalog.lower({q}){days})::int8), "
                 f"''::bytea ORDER BY c.no) AS lo_{q}")
    parts.append(f"pg_catalog.string_agg(pg_catalog.int8send((CASE WHEN pg_catalog.upper_inc({q}) "
                 f"THEN pg_catalog.upper({q}) ELSE pg_catalog.upper({q}) - 1 END{days})::int8), "
                 f"''::bytea ORDER BY c.no) AS hi_{q}")
for a in sets + ["vals"]:
    parts.append(f"pg_catalog.string_agg(pg_catalog.int8send(pg_catalog.cardinality({a})::int8), "
                 f"''::bytea ORDER BY c.no) AS size_{a}")
    parts.append(f"pg_catalog.convert_to(pg_catalog.string_agg(pg_catalog.array_to_string({a}, "
                 f"E'\\\\x01', E'\\\\x02'), E'\\\\x01' ORDER BY c.no), 'UTF8') AS joined_{a}")
# the classes as analysts read them (the view grouped), and, for a compact release, its
# storage's rows (one a class; no two of them merge here: checked by the count)
sources = {"view": f"SELECT {grouped} FROM %(released)s GROUP BY {', '.join(ranges + sets)}"}
release = release_rows.by_id(plpy, plpy.execute(
    "SELECT release_id FROM anon.releases WHERE release_name = '%(table)s_stable'")[0]["release_id"])
stored = class_counts.storage_for(plpy, release)
if stored is not None:
    sources["storage"] = (f"SELECT {', '.join(ranges + sets)}, {sensitive} AS vals "
                          f"FROM {stored[1].relation} AS s WHERE {stored[1].rows} > 0")
best, found = {}, {}
for source, grouped_classes in sources.items():
    query = (f"WITH c AS MATERIALIZED (SELECT pg_catalog.row_number() OVER () AS no, g.* FROM "
             f"({grouped_classes}) g) SELECT {', '.join(parts)} FROM c")
    best[source] = float("inf")
    for _ in range(%(repeat)d):
        t0 = time.perf_counter()
        row = plpy.execute(query)[0]
        classes = {"n": int(row["n"])}
        for q in ranges:
            classes[q] = (class_counts.int8_array(row["lo_" + q]),
                          class_counts.int8_array(row["hi_" + q]))
        for a in sets + ["vals"]:
            sizes = class_counts.int8_array(row["size_" + a])
            codes, texts = _texts_ending(row["joined_" + a], int(sizes.sum()), 0x01, 0x02)
            classes[a] = (np.repeat(np.arange(sizes.size), sizes), codes, texts)
        best[source] = min(best[source], time.perf_counter() - t0)
    found[source] = (classes["n"], int(classes["vals"][0].size))
GD["floor_classes"] = classes
report({"best": best, "found": found})
"""

#: every person matched to the classes holding them (ranks and codes, then the kernel), then
#: each person's candidates as bitmasks intersected
LOCATE = """
import numpy as np
from plpy_anon.core import containment
data, classes = GD["floor_data"], GD["floor_classes"]
ranges, sets, count = %(ranges)r, %(sets)r, classes["n"]


def axes():
    out = []
    for q in ranges:
        values = data.columns[q].values.astype(np.int64)
        low, high = classes[q]
        universe = np.unique(np.concatenate([values, low, high]))
        out.append(containment.Axis(np.searchsorted(universe, values),
                                    np.searchsorted(universe, low), np.searchsorted(universe, high)))
    for q in sets:
        column = data.columns[q]
        owners, codes, texts = classes[q]
        # codes by frequency (as the fit orders a categorical QI): a class's set is then a
        # narrow interval of codes, which the kernel's tree cuts
        width = len(column.dictionary)
        people = np.asarray(column.codes, dtype=np.int64)
        frequency = np.empty(width + 1, dtype=np.int64)
        frequency[:-1][np.argsort(-np.bincount(people, minlength=width), kind="stable")] = \
            np.arange(width)
        frequency[-1] = -1
        position = {t: i for i, t in enumerate(column.dictionary)}
        recode = np.array([position.get(t, width) for t in texts] + [width], dtype=np.int64)
        out.append(containment.set_axis(frequency[people], owners, frequency[recode[codes]],
                                        count, width))
    return out


n = data.n_rows
warm = axes()                                 # the kernels loaded before the timing
containment.contained([containment.Axis(a.points[:100], a.low, a.high, a.members, a.width)
                       for a in warm], 100, count, engine="numba")
best = {"locate": float("inf"), "intersect": float("inf")}
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    p, c = containment.contained(axes(), n, count, engine="numba")
    best["locate"] = min(best["locate"], time.perf_counter() - t0)
# what the versions before left each person: every value (the AND costs the same whatever
# the mask; so the people below l are those whose classes show fewer than l values)
sensitive = data.columns[%(sensitive)r]
owners, codes, texts = classes["vals"]
position = {t: i for i, t in enumerate(sensitive.dictionary)}
recode = np.array([position.get(t, 63) for t in texts] + [63], dtype=np.uint64)
own = np.left_shift(np.uint64(1), np.asarray(sensitive.codes, dtype=np.uint64))
earlier = np.full(n, np.iinfo(np.uint64).max, dtype=np.uint64)
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    masks = np.zeros(count, dtype=np.uint64)
    np.bitwise_or.at(masks, owners, np.left_shift(np.uint64(1), recode[codes]))
    order = np.argsort(p, kind="stable")
    people, starts = np.unique(p[order], return_index=True)
    held = np.zeros(n, dtype=np.uint64)
    held[people] = np.bitwise_or.reduceat(masks[c[order]], starts)
    left = held & earlier
    below = int((np.bitwise_count(left) < %(l)d)[people].sum())
    best["intersect"] = min(best["intersect"], time.perf_counter() - t0)
best.update(pairs=int(p.size), people=int(n), placed=int(people.size), below_l=below,
            own_value_kept=int(((held & own) != 0)[people].sum()))
report(best)
"""

#: the people's hashes matched to a state of as many (sorted, as the state stores them): the
#: people sorted by their first 8 bytes, searchsorted, the whole hash compared
MATCH = """
import numpy as np
hashes = GD["floor_hashes"]
n = hashes.size
rng = np.random.default_rng(43)
# the state: the people but %(churn)r of them, who are someone else, sorted as it is stored
state = hashes.copy()
gone = rng.random(n) < %(churn)r
state[gone] = np.frombuffer(rng.bytes(32 * int(gone.sum())), dtype="S32")
state = np.sort(state)
best = float("inf")
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    keys = state.view(">u8").reshape(-1, 4)[:, 0].astype(np.uint64)
    mine = hashes.view(">u8").reshape(-1, 4)[:, 0].astype(np.uint64)
    order = np.argsort(mine)
    at = np.minimum(np.searchsorted(keys, mine[order]), n - 1)
    found = np.full(n, -1, dtype=np.int64)
    hit = state[at] == hashes[order]
    found[order[hit]] = at[hit]
    best = min(best, time.perf_counter() - t0)
report({"match": best, "found": int((found >= 0).sum()), "new": int(gone.sum())})
"""


#: a statement timed in the backend by its CPU seconds; plpy_anon.db.timing's clock (the
#: phases a create or refresh records) reads time.process_time meanwhile
CPU_CALL = """
import types
from plpy_anon.db import timing
clock, entering = timing.time, timing.entering
timing.time = types.SimpleNamespace(monotonic=time.process_time)
timing.entering = lambda started: entering(time.process_time())
try:
    t0 = time.process_time()
    row = plpy.execute(%(sql)r)[0]
    took = time.process_time() - t0
finally:
    timing.time, timing.entering = clock, entering
report({"seconds": took, "value": str(list(row.values())[0])})
"""


def in_backend(conn, code: str) -> dict:
    """:func:`backend` with the chosen clock (PLPY_ANON_FLOOR_CLOCK)."""
    if CLOCK == "cpu":
        code = code.replace("time.perf_counter()", "time.process_time()")
    return backend(conn, code)


def timed_call(conn, sql: str) -> tuple[float, str]:
    """(seconds, the first column of the statement's one row): the wall clock around the
    statement, or the backend's CPU seconds (:data:`CPU_CALL`)."""
    if CLOCK != "cpu":
        t0 = time.perf_counter()
        value = conn.execute(sql).fetchone()[0]
        return time.perf_counter() - t0, value
    out = backend(conn, CPU_CALL % {"sql": sql})
    return out["seconds"], out["value"]


def stable_and_fresh(conn, table: str, spec: dict, shape: dict) -> dict:
    """Both releases made, then REFRESHES rounds of churn and both refreshed; the seconds (the
    best refresh of each mode) and the phases of the best stable refresh."""
    qis = "ARRAY[" + ", ".join(f"'{q}'" for q in spec["ranges"] + spec["sets"]) + "]"
    releases, figures = {}, {"fresh": float("inf"), "stable": float("inf"), "phases": {}}
    for mode in ("fresh", "stable"):
        figures[f"create {mode}"], releases[mode] = timed_call(
            conn, f"SELECT anon.mondrian_view('{table}', k => {K}, l => {L}, "
            f"quasi_identifiers => {qis}, sensitive => ARRAY['{spec['sensitive']}'], "
            f"identifiers => ARRAY['id'], refresh_mode => '{mode}', "
            f"release_name => '{table}_{mode}')")
    for round_ in range(REFRESHES):
        if round_:
            conn.execute(f"DROP TABLE {table}_left")
        churn(conn, table)
        for mode in ("fresh", "stable"):
            took, _ = timed_call(conn, f"SELECT anon.refresh('{releases[mode]}')")
            if took < figures[mode]:
                figures[mode] = took
                if mode == "stable":
                    figures["phases"] = conn.execute(
                        "SELECT phases FROM anon.refresh_history WHERE release_name LIKE %s "
                        "ORDER BY refresh_id DESC LIMIT 1",
                        (f"%{table}_stable",)).fetchone()[0] or {}
    figures["releases"] = releases
    for mode, release in releases.items():
        smallest, fewest = verified(conn, release, shape)
        print(f"  {mode} release verified from its rows: smallest class {smallest} (k = {K}), "
              f"fewest sensitive values in a class {fewest} (l = {L})", flush=True)
        assert smallest >= K and fewest >= L, (release, smallest, fewest)
    return figures


def primitives(conn, released: str, table: str, spec: dict) -> dict:
    """Each step the stable mode cannot skip, by its cheapest primitive (seconds), with what
    each found."""
    fmt = {"ranges": spec["ranges"], "sets": spec["sets"], "sensitive": spec["sensitive"],
           "dates": spec["dates"], "table": table, "repeat": REPEAT, "salt": SALT,
           "released": released, "l": L,
           "churn": float(os.environ.get("PLPY_ANON_STABLE_CHURN", "0.01"))}
    out = {}
    read = in_backend(conn, READ % fmt)
    out["read id"] = (max(read["with"] - read["without"], 0.0),
                      f"read with id {read['with']:.3f} s, without {read['without']:.3f} s")
    python = in_backend(conn, HASH_PYTHON % fmt)
    sql = in_backend(conn, HASH_SQL % fmt)
    in_sql = max(sql["sha256"] - sql["ids"], 0.0)
    out["hash"] = (min(python["run"], python["compiled"], in_sql),
                   (f"the run's hash {python['run']:.3f} s, the compiled kernels' "
                    f"{python['compiled']:.3f} s; PostgreSQL's sha256 in the read {in_sql:.3f} s "
                   f"({sql['sha256']:.3f} s less the ids alone {sql['ids']:.3f} s); "
                   f"same digests: {sql['same_digests']}"))
    size, rows = conn.execute(
        "SELECT sum(pg_column_size(s.*))::int8, count(*) FROM anon.release_state s "
        "JOIN anon.releases r USING (release_id) WHERE r.release_name = %s",
        (f"{table}_stable",)).fetchone()
    conn.execute("CREATE TABLE floor_state (chunk int4, blob bytea)")
    backend(conn, STATE_BYTES % {"size": size})
    writes, reads = {}, {}
    for layout, n_rows in (("one row", 1), (f"{rows} rows", rows)):
        best = float("inf")
        for _ in range(REPEAT):
            if CLOCK == "cpu":
                # its CPU seconds in the backend (the commit's wait is no CPU)
                took = in_backend(conn, "t0 = time.perf_counter()\n" + STATE_WRITE % {
                    "rows": n_rows} + "report({'write': time.perf_counter() - t0})\n")["write"]
            else:
                t0 = time.perf_counter()
                backend(conn, STATE_WRITE % {"rows": n_rows})
                took = time.perf_counter() - t0
            best = min(best, took)
        writes[layout] = best
        reads[layout] = in_backend(conn, STATE_READ % fmt)["read"]
    for step, took in (("state write", writes), ("state read", reads)):
        out[step] = (min(took.values()), f"{size / 1e6:.1f} MB: " + ", ".join(
            f"{layout} {s:.3f} s" for layout, s in took.items()))
    classes = in_backend(conn, CLASSES % fmt)
    out["classes"] = (min(classes["best"].values()), "; ".join(
        f"{source}: {n:,} classes, {values:,} values, {classes['best'][source]:.3f} s"
        for source, (n, values) in classes["found"].items()))
    located = in_backend(conn, LOCATE % fmt)
    out["locate"] = (located["locate"], (f"{located['pairs']:,} (person, class) pairs, "
                     f"{located['placed']:,} of {located['people']:,} people in a class"))
    out["intersect"] = (located["intersect"], (f"{located['below_l']:,} below l = {L}; own value "
                        f"kept by {located['own_value_kept']:,}"))
    match = in_backend(conn, MATCH % fmt)
    out["match"] = (match["match"], f"{match['found']:,} found, {match['new']:,} new")
    return out


def main() -> None:
    table, spec = TABLE, TABLES[TABLE]
    shape = {"rows": spec["rows"], "qis": spec["ranges"] + spec["sets"],
             "sensitive": spec["sensitive"], "identifiers": ["id"]}
    with extension_db() as conn:
        # the first release of a backend loads the compiled kernels: paid here, by neither mode
        conn.execute("CREATE TABLE warm_up AS SELECT g AS id, g % 97 AS a, 'v' || g % 5 AS s "
                     "FROM generate_series(1, 2000) g")
        conn.execute("ALTER TABLE warm_up ADD PRIMARY KEY (id)")
        for mode in ("fresh", "stable"):
            conn.execute(f"SELECT anon.mondrian_view('warm_up', k => {K}, l => {L}, "
                         "quasi_identifiers => ARRAY['a'], sensitive => ARRAY['s'], "
                         f"refresh_mode => '{mode}', release_name => 'warm_up_{mode}')")
        backend(conn, f"GD['floor_table'] = {table!r}")         # the table READ reads
        load(conn, table, shape)
        n = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        copy = copy_seconds(conn, table)
        timed = stable_and_fresh(conn, table, spec, shape)
        copy_after = copy_seconds(conn, table)
        print(f"  {table} stable state after the refresh: "
              f"{state_size(conn, timed['releases']['stable'])}", flush=True)
        floor = primitives(conn, timed["releases"]["stable"], table, spec)
    fresh, stable = timed["fresh"], timed["stable"]
    # the refresh's own check_classes phase reads the classes and locates everyone with the run's
    # hints (core.containment.contained's linked and near): where it is cheaper than the two
    # primitives, it is the floor of both
    phase = timed["phases"].get("check_classes")
    both = floor["classes"][0] + floor["locate"][0]
    counted = dict(floor)
    if phase is not None and phase < both:
        del counted["classes"], counted["locate"]
        counted["classes + locate"] = (phase, (f"the refresh's check_classes phase (the two "
                                              f"primitives: {both:.3f} s)"))
    total = sum(s for s, _ in counted.values())
    unit = "s of the backend's CPU" if CLOCK == "cpu" else "s"
    print(f"clock: {CLOCK}; {table} ({n:,} rows): copy {copy:.2f} s before, {copy_after:.2f} s "
          f"after (wall); create fresh {timed['create fresh']:.3f} {unit}, stable "
          f"{timed['create stable']:.3f} {unit}", flush=True)
    print(f"refresh after {os.environ.get('PLPY_ANON_STABLE_CHURN', '0.01')} churn (best of "
          f"{REFRESHES}): fresh {fresh:.3f} {unit}, stable {stable:.3f} {unit} = "
          f"{stable / fresh:.2f}x (target <= {TARGET}x)")
    print("stable refresh phases (s): " + ", ".join(
        f"{p} {s:.3f}" for p, s in sorted(timed["phases"].items(), key=lambda i: -i[1])))
    rows = [[step, f"{s:.3f}", how] for step, (s, how) in floor.items()]
    if "classes + locate" in counted:
        rows.append(["classes + locate", f"{phase:.3f}", counted["classes + locate"][1]])
    rows.append(["sum of the primitives", f"{total:.3f}", " + ".join(counted)])
    rows.append(["fresh refresh", f"{fresh:.3f}", f"plain copy {copy_after:.2f} s (wall)"])
    rows.append(["stable refresh", f"{stable:.3f}", f"{stable / fresh:.2f}x fresh"])
    rows.append(["floor (fresh + sum) / fresh", f"{(fresh + total) / fresh:.2f}x",
                 (f"target {TARGET}x: the stable mode's budget beyond fresh "
                 f"{(TARGET - 1) * fresh:.3f} s, its primitives {total:.3f} s")])
    table_md = markdown_table(["step", f"seconds ({CLOCK})", "measured"], rows)
    print(table_md)
    name = "stable_floor.md" if table == "synth" else f"stable_floor_{table}.md"
    (results_dir() / name).write_text(table_md + "\n")


if __name__ == "__main__":
    main()
