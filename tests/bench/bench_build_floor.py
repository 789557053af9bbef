"""The default 1M build's floor: the parts no build can skip, each measured alone, beside a copy.

    python -m tests.bench build_floor     # PLPY_ANON_FLOOR_ROWS=1000000, PLPY_ANON_FLOOR_REPEAT=3

bench_build's release (the synthetic table, 6 QIs, sensitive diagnosis, k = 10, compact layout,
fresh mode) is built once in a new backend whose ``plpy.execute``, ``plpy.prepare`` and
``plpy.cursor`` are wrapped to record every statement the build runs (its text, arguments, the
phase of ``db.timing`` running, wall and backend CPU seconds; a cursor's fetches charged to its
statement). Then, in the same backend, alternately with a ``CREATE TABLE AS`` copy of the source
(the yardstick, wall and the backend's CPU from /proc), each part is run alone, the smallest of
the repeats kept:

* read: the read phase's statements over the source (the chunks' aggregates into Python values);
* write: ``CREATE TABLE AS`` of the release's stored rows (its storage, one row per class);
* verify: the verification's statements that read the release (its grouped pass over the
  storage, each cursor fetched to its end);
* fit: the Mondrian fit of the same columns on the compiled kernels (loaded before), in this
  process (bench_fit's reading and encoding), the smallest CPU of the repeats.

Their sum in copies against the target (5x at 1M): above it, the target cannot be met by any
build that reads the source through SQL, fits, writes the release and verifies it from its
rows. Printed beside it: the build end to end (wall and the backend's CPU) and its phases on the
backend's CPU (its phase clock read on process CPU for this build), each with the CPU of its
statements that run no other (from the recording): what is left of a phase is Python.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from plpy_anon.core import mondrian_jit
from plpy_anon.core.encoding import encode_numeric
from plpy_anon.core.mondrian import Mondrian
from tests.bench.bench_build import QIS, RATIO_TARGETS, load
from tests.bench.bench_coldstart import backend_cpu
from tests.bench.bench_fit import fit_seconds, read_columns
from tests.bench.bench_mondrian import fresh_backend, load_synthetic, release_figures
from tests.bench.common import extension_db, markdown_table, results_dir

#: wraps the backend's plpy so that every statement is recorded in GD["floor_records"]
RECORD = r"""
DO $do$
import time
from plpy_anon.db import timing

records = GD.setdefault("floor_records", [])
depth = [0]         # statements run inside a recorded one (a PL/Python function it calls) nest
if "floor_plpy" not in GD:
    GD["floor_plpy"] = (plpy.execute, plpy.prepare, plpy.cursor)
execute, prepare, cursor = GD["floor_plpy"]


def running():
    clock = timing.current()
    return clock._running[-1] if clock is not None else None


def reading(sql):
    return sql.lstrip().upper().startswith(("SELECT", "WITH"))


def timed(kind, sql, types, args, call):
    # the arguments of what the replay runs again only (a read's are a few values)
    record = {"phase": running(), "kind": kind, "sql": sql, "types": types,
              "args": args if reading(sql) else None,
              "wall": 0.0, "cpu": 0.0, "depth": depth[0]}
    records.append(record)
    return charged(record, call)


def charged(record, call):
    t0, c0 = time.perf_counter(), time.process_time()
    depth[0] += 1
    try:
        return call()
    finally:
        depth[0] -= 1
        record["wall"] += time.perf_counter() - t0
        record["cpu"] += time.process_time() - c0


class Plan:
    def __init__(self, plan, sql, types):
        self.plan, self.sql, self.types = plan, sql, types

    def execute(self, args=None, *rest):
        return timed("plan", self.sql, self.types, args,
                     lambda: self.plan.execute(*(() if args is None else (args,)), *rest))

    def cursor(self, args=None):
        return recorded_cursor(self, args)

    def __getattr__(self, name):
        return getattr(self.plan, name)


class Cursor:
    def __init__(self, inner, record):
        self.inner, self.record = inner, record

    def fetch(self, n):
        return charged(self.record, lambda: self.inner.fetch(n))

    def __iter__(self):
        while True:
            batch = self.fetch(1000)
            if not batch:
                return
            yield from batch

    def __getattr__(self, name):
        return getattr(self.inner, name)


def recorded_cursor(query, args=None):
    plan = query.plan if isinstance(query, Plan) else query
    sql, types = (query.sql, query.types) if isinstance(query, Plan) else (query, None)
    record = {"phase": running(), "kind": "cursor", "sql": sql, "types": types, "args": args,
              "wall": 0.0, "cpu": 0.0, "depth": depth[0]}
    records.append(record)
    inner = charged(record, lambda: cursor(plan, *(() if args is None else (args,))))
    return Cursor(inner, record)


def recorded_execute(query, *rest):
    if isinstance(query, Plan):
        return timed("plan", query.sql, query.types, rest[0] if rest else None,
                     lambda: execute(query.plan, *rest))
    return timed("execute", query, None, None, lambda: execute(query, *rest))


def recorded_prepare(sql, types=None):
    return Plan(prepare(sql, types) if types is not None else prepare(sql), sql, types)


plpy.execute, plpy.prepare, plpy.cursor = recorded_execute, recorded_prepare, recorded_cursor

# the build's phase clock read on the backend's CPU (less sensitive to the load than wall)
import types
entering = GD.setdefault("floor_entering", timing.entering)
timing.time = types.SimpleNamespace(monotonic=time.process_time)
timing.entering = lambda started: entering(time.process_time())
$do$ LANGUAGE plpython3u
"""

#: the recording's sums by phase, the backend's plpy given back; a notice ``floor <json>``
SUMMARY = r"""
DO $do$
import json
import time
from plpy_anon.db import timing
plpy.execute, plpy.prepare, plpy.cursor = GD["floor_plpy"]
timing.time, timing.entering = time, GD["floor_entering"]
by_phase = {}
records = GD["floor_records"]
# a statement's own SQL: one that runs no recorded statement inside it (a statement calling the
# build's PL/Python function is charged by the phase clock to the phases that function enters)
leaves = [r for i, r in enumerate(records)
          if i + 1 == len(records) or records[i + 1]["depth"] <= r["depth"]]
for r in sorted(records, key=lambda r: -r["wall"])[:int(%(shown)d)]:
    plpy.notice("statement %%s depth %%d %%.3f s wall %%.3f s CPU: %%s" %% (
        r["phase"], r["depth"], r["wall"], r["cpu"], " ".join(r["sql"].split())[:200]))
for r in leaves:
    s = by_phase.setdefault(r["phase"] or "none", [0, 0.0, 0.0])
    s[0] += 1
    s[1] += r["wall"]
    s[2] += r["cpu"]
plpy.notice("floor " + json.dumps(by_phase))
$do$ LANGUAGE plpython3u
"""

#: one part alone: the recorded statements of a phase that read ``relation`` (SELECTs only),
#: again; a notice ``floor <json>`` of [wall, cpu, statements]
REPLAY = r"""
DO $do$
import json, time
phase, relation = %(phase)r, %(relation)r
chosen = [r for r in GD["floor_records"] if r["phase"] == phase and relation in r["sql"]
          and r["sql"].lstrip().upper().startswith(("SELECT", "WITH"))]
plans = {}
for r in chosen:
    if r["types"] is not None and r["sql"] not in plans:
        plans[r["sql"]] = plpy.prepare(r["sql"], r["types"])
t0, c0 = time.perf_counter(), time.process_time()
for r in chosen:
    query = plans.get(r["sql"], r["sql"])
    if r["kind"] == "cursor":
        cursor = plpy.cursor(query, r["args"]) if r["args"] is not None else plpy.cursor(query)
        while cursor.fetch(20000):
            pass
        cursor.close()
    elif r["args"] is not None:
        plpy.execute(query, r["args"])
    else:
        plpy.execute(query)
plpy.notice("floor " + json.dumps([time.perf_counter() - t0, time.process_time() - c0,
                                   len(chosen)]))
$do$ LANGUAGE plpython3u
"""


def notice_json(conn, statement: str):
    notices = []

    def keep(diagnostic):
        notices.append(diagnostic.message_primary or "")

    conn.add_notice_handler(keep)
    try:
        conn.execute(statement)
    finally:
        conn.remove_notice_handler(keep)
    for m in notices:
        if m.startswith("statement "):
            print(m, flush=True)
    return json.loads(next(m for m in notices if m.startswith("floor ")).split(" ", 1)[1])


def shown_statements() -> int:
    """PLPY_ANON_FLOOR_STATEMENTS: how many of the build's longest statements to print."""
    return int(os.environ.get("PLPY_ANON_FLOOR_STATEMENTS", "0"))


def timed_in(conn, pid: int, statement: str) -> tuple[float, float]:
    """(wall s, backend CPU s) of ``statement`` in the backend ``pid`` of ``conn``."""
    c0, t0 = backend_cpu(pid), time.perf_counter()
    conn.execute(statement)
    return time.perf_counter() - t0, backend_cpu(pid) - c0


def measure(conn, n: int, repeat: int) -> list[list] | None:
    if not load_synthetic(conn, n):
        return None
    conn.execute("VACUUM ANALYZE synthetic")
    with fresh_backend(conn) as other:
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        copy = [timed_in(other, pid, "CREATE TABLE synthetic_copy AS SELECT * FROM synthetic")]
        other.execute("DROP TABLE synthetic_copy")
        other.execute(RECORD)
        c0, t0 = backend_cpu(pid), time.perf_counter()
        release = other.execute(
            "SELECT anon.mondrian_view('synthetic', k => 10, quasi_identifiers => %s, "
            "sensitive => ARRAY['diagnosis'], replace => true)", (QIS,)).fetchone()[0]
        e2e, build_cpu = time.perf_counter() - t0, backend_cpu(pid) - c0
        in_build = notice_json(other, SUMMARY % {"shown": shown_statements()})
        storage = other.execute(
            "SELECT format('%%I.%%I', release_schema, coalesce(parameters ->> 'storage', "
            "release_name)) FROM anon.releases WHERE format('%%I.%%I', release_schema, "
            "release_name) = %s", (release,)).fetchone()[0]
        stored_name = storage.split(".", 1)[1].strip('"')
        parts = {"read": [], "write": [], "verify": []}
        replayed = {}
        for _ in range(repeat):
            wall, cpu, replayed["read"] = notice_json(
                other, REPLAY % {"phase": "read", "relation": "synthetic"})
            parts["read"].append((wall, cpu))
            parts["write"].append(timed_in(other, pid,
                                           f"CREATE TABLE floor_written AS SELECT * FROM {storage}"))
            other.execute("DROP TABLE floor_written")
            wall, cpu, replayed["verify"] = notice_json(
                other, REPLAY % {"phase": "verify", "relation": stored_name})
            parts["verify"].append((wall, cpu))
            copy.append(timed_in(other, pid,
                                 "CREATE TABLE synthetic_copy AS SELECT * FROM synthetic"))
            other.execute("DROP TABLE synthetic_copy")
    figures = release_figures(conn, release)
    phases = figures["timing"]["phases"]
    columns = read_columns(conn)
    fits = [fit_seconds(columns, "numba")[:2] for _ in range(repeat)]
    parts["fit"] = fits
    conn.execute(f"SELECT anon.drop_release('{release}')")
    copy_wall = min(w for w, _ in copy)
    copy_cpu = min(c for _, c in copy)
    best = {p: (min(w for w, _ in runs), min(c for _, c in runs)) for p, runs in parts.items()}
    wall_sum = sum(w for w, _ in best.values()) / copy_wall
    cpu_sum = sum(c for _, c in best.values()) / copy_cpu
    target = RATIO_TARGETS.get(n)
    rows = []
    for p, (wall, cpu) in best.items():
        statements = f" ({replayed[p]} statements)" if p in replayed else ""
        print(f"{n:,} rows, {p} alone{statements}: {wall:.3f} s = {wall / copy_wall:.2f}x the "
              f"copy's wall, CPU {cpu:.3f} s = {cpu / copy_cpu:.2f}x the copy's CPU", flush=True)
        rows.append([f"{n:,}", p, f"{wall:.3f}", f"{wall / copy_wall:.2f}x", f"{cpu:.3f}",
                     f"{cpu / copy_cpu:.2f}x"])
    verdict = "" if target is None else (
        f" against the target {target:g}x: "
        + ("BLOCKED (the floor alone exceeds it)" if min(wall_sum, cpu_sum) > target
           else f"room {target - wall_sum:.2f} copies of wall above the floor"))
    print(f"{n:,} rows: the floor (read + write + verify + fit) {wall_sum:.2f}x the copy's wall "
          f"({copy_wall:.3f} s), {cpu_sum:.2f}x its CPU ({copy_cpu:.3f} s){verdict}; load "
          f"{load()}", flush=True)
    print(f"{n:,} rows: the build end to end {e2e:.2f} s = {e2e / copy_wall:.2f}x the copy's "
          f"wall, backend CPU {build_cpu:.2f} s = {build_cpu / copy_cpu:.2f}x its CPU; by phase "
          "(the phase clock on the backend's CPU), in copies of CPU, the phase (the CPU of its "
          "statements that run no other, their number): "
          + ", ".join(f"{p} {s / copy_cpu:.2f} ({in_build.get(p, [0, 0.0, 0.0])[2] / copy_cpu:.2f}"
                      f", {in_build.get(p, [0])[0]})" for p, s in phases.items() if s >= 0.001),
          flush=True)
    rows.append([f"{n:,}", "floor", f"{sum(w for w, _ in best.values()):.3f}",
                 f"{wall_sum:.2f}x", f"{sum(c for _, c in best.values()):.3f}",
                 f"{cpu_sum:.2f}x"])
    rows.append([f"{n:,}", "the build", f"{e2e:.3f}", f"{e2e / copy_wall:.2f}x",
                 f"{build_cpu:.3f}", f"{build_cpu / copy_cpu:.2f}x"])
    rows += [[f"{n:,}", f"the build's {p} (its statements)", "", "", f"{s:.3f}",
              f"{s / copy_cpu:.2f}x ({in_build.get(p, [0, 0.0, 0.0])[2] / copy_cpu:.2f}x)"]
             for p, s in phases.items() if s >= 0.001]
    return rows


def main() -> None:
    if mondrian_jit.kernels() is None:
        print("numba cannot be imported: no compiled fit to measure")
        return
    Mondrian(k=2, engine="numba").fit([encode_numeric("x", np.arange(10))])   # load the kernels
    sizes = [int(s) for s in os.environ.get("PLPY_ANON_FLOOR_ROWS", "1000000").split(",")]
    repeat = int(os.environ.get("PLPY_ANON_FLOOR_REPEAT", "3"))
    with extension_db() as conn:
        rows = [r for n in sizes for r in (measure(conn, n, repeat) or [])]
    text = ("## The default build's floor: its irreducible parts alone, against a copy\n\n"
            + markdown_table(["rows", "part", "wall s", "in copies", "CPU s", "in copies (CPU)"],
                             rows) + "\n")
    print(text)
    (results_dir() / "build_floor.md").write_text(text)


if __name__ == "__main__":
    main()
