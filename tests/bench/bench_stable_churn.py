"""How realistic churn refreshes a stable release created region by region (issue 47): the
synthetic table of bench_stable_budget created in the stable mode at 64MB (64 regions), then for
each churn shape, in a transaction rolled back after it, the refresh's plan
(``stable_regions.plan_refresh`` and ``out_of_core.refuse_unless_apart``, the code a refresh
runs before it reads a region): the movers (known people whose QIs left the box of the region
remembering them, read with that region), the regions still linked (a person two regions
remember, a held back person waiting in another region's group, a group of several regions) and
merged, the largest group's regions, rows and estimated bytes in the stable run (rows x
STABLE_ROW_FACTOR x the row's estimate) against the budget's room for a region, and whether the
refresh runs region by region. Two looser closures beside, from the same links: the regions
linked by people alone (union-find over the links, no hull), and one hull step. Then, for the
shapes that move people (PLPY_ANON_STABLE_CHURN_REFRESH=all: every shape; none: none), the
refresh itself
in a fresh backend at the budget, in a transaction rolled back after it: its seconds, the
backend's CPU seconds, VmHWM (after the shape, and after the refresh), peak RssAnon (the
backend's private memory) and RssShmem (shared buffers touched) against the budget, and the
check's figures.

The shapes (nobody tuned the code for them; ids are 1..n, a "random other row" is the row of a
uniformly drawn id): everyone's age + 1; 0.1 % and 1 % of the people with one QI (drawn among
the 6) set to a random other row's value; 1 % moved to a random other row's 6 QIs; 1 % with a
random other row's diagnosis; 1 % left; 1 % joined with random other rows' values.

PLPY_ANON_STABLE_CHURN_ROWS (default 1000000), PLPY_ANON_STABLE_CHURN_BUDGET (default 64MB).
The plan's seconds are the backend's CPU seconds (/proc/<pid>/stat); VmHWM from
/proc/<pid>/status once the refresh returned.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.bench.bench_mondrian import MemorySampler, fresh_backend, load_synthetic
from tests.bench.bench_stable_budget import CREATE, QIS, K, L, backend_cpu
from tests.bench.common import extension_db, markdown_table, results_dir

#: a function of the bench's session (plpython3u, as the superuser the bench connects as): the
#: refresh's plan of a stable release beyond the budget, and the refusal it would meet, as JSON
PLAN_ONLY = r"""
CREATE OR REPLACE FUNCTION pg_temp.stable_refresh_plan(name text) RETURNS jsonb
LANGUAGE plpython3u AS $body$
import json
from plpy_anon.core import refresh_groups
from plpy_anon.db import extschema, out_of_core as ooc, releases, stable_regions
from plpy_anon.db.sqltext import jsonb, run
p = extschema.use('anon', plpy)
release = run(p, "SELECT * FROM anon.releases WHERE format('%I.%I', release_schema, release_name) = $1",
              ["text"], [name])[0]
method = releases.method_named(release["method"])
spec = method.spec_of(jsonb(release["parameters"]))
plan = ooc.sized(p, release, spec)
_, tbl, qis, sens, budget, bytes_per_row, n, _ = plan
release, spec, _ = stable_regions.with_secrets(method, p, release, None)
src = ooc.Source(p, tbl, qis, sens, ooc.source_members(p, tbl))
cols = {c.name: c for c in ooc.catalog.table_columns(p, tbl)}
identifiers = [cols[c] for c in spec.promise.identifiers or ()]
captured = {}
closure = refresh_groups.plan


def capturing(boxes, links, rows, everything=False):
    captured.update(boxes=boxes, links=list(links), rows=rows)
    return closure(boxes, links, rows, everything)


stable_regions.refresh_groups.plan = capturing
try:
    with ooc.release_rows.owner_state(p):
        planned = stable_regions.plan_refresh(p, release, src, identifiers)
finally:
    stable_regions.refresh_groups.plan = closure


def largest(pairs):
    # (regions, rows) of the largest group of union-find over ``pairs``, no hull closure
    boxes, rows = captured["boxes"], captured["rows"]
    parent = list(range(len(boxes)))

    def find(r):
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r
    for a, b in pairs:
        parent[find(a)] = find(b)
    sizes = {}
    for r in range(len(boxes)):
        got = sizes.setdefault(find(r), [0, 0])
        got[0] += 1
        got[1] += rows[r]
    return max(sizes.values(), key=lambda v: (v[1], v[0]))


boxes = captured["boxes"]
one_step = [(a, r) for a, b in captured["links"]
            for r in range(len(boxes))
            if refresh_groups.meets(refresh_groups.hull([boxes[a], boxes[b]]), boxes[r])]
links_only, hull_once = largest(captured["links"]), largest(one_step)
regions, rows = planned.largest()
room = ooc.core.leaf_budget(budget, ooc.resident_bytes())
refused = None
try:
    ooc.refuse_unless_apart(planned, plan, release, stable_regions.NotByRegions)
except stable_regions.NotByRegions as error:
    refused = str(error)
sizes = sorted(planned.groups.group_rows.values(), reverse=True)
return json.dumps({
    "regions": planned.regions, "movers": planned.movers, "waiting": planned.waiting,
    "joiners": planned.joiners, "spread_groups": planned.spread_groups,
    "everything": planned.everything, "groups": len(sizes),
    "merged_groups": sum(1 for g in set(planned.groups.groups)
                         if len(planned.groups.members(g)) > 1),
    "largest_group_regions": len(regions), "largest_group_rows": rows,
    "largest_group_bytes": rows * ooc.STABLE_ROW_FACTOR * bytes_per_row, "room_bytes": room,
    "budget_bytes": budget, "largest_region_rows": max(planned.rows),
    "rows": sum(planned.rows), "closure_rounds": planned.groups.rounds, "refused": refused,
    "linked_pairs": len(captured["links"]),
    "links_only_largest": links_only, "hull_once_largest": hull_once})
$body$"""

#: each shape: (name, SQL changing the table; %(n)d the rows, %(q)s a random QI's assignment)
ONE_QI = """UPDATE synthetic s SET
    age = CASE WHEN c.q = 0 THEN d.age ELSE s.age END,
    zip = CASE WHEN c.q = 1 THEN d.zip ELSE s.zip END,
    sex = CASE WHEN c.q = 2 THEN d.sex ELSE s.sex END,
    segment = CASE WHEN c.q = 3 THEN d.segment ELSE s.segment END,
    income = CASE WHEN c.q = 4 THEN d.income ELSE s.income END,
    visit = CASE WHEN c.q = 5 THEN d.visit ELSE s.visit END
FROM (SELECT id, floor(random() * 6)::int AS q, 1 + floor(random() * %(n)d)::int AS donor
      FROM synthetic WHERE random() < %(share)s) c JOIN synthetic d ON d.id = c.donor
WHERE s.id = c.id"""
SHAPES = [
    ("everyone's age + 1", "UPDATE synthetic SET age = age + 1"),
    ("0.1 % one QI set to a random row's", ONE_QI.replace("%(share)s", "0.001")),
    ("1 % one QI set to a random row's", ONE_QI.replace("%(share)s", "0.01")),
    ("1 % moved to a random row's 6 QIs", """UPDATE synthetic s SET age = d.age, zip = d.zip,
        sex = d.sex, segment = d.segment, income = d.income, visit = d.visit
        FROM (SELECT id, 1 + floor(random() * %(n)d)::int AS donor FROM synthetic
              WHERE random() < 0.01) c JOIN synthetic d ON d.id = c.donor WHERE s.id = c.id"""),
    ("1 % diagnosis set to a random row's", """UPDATE synthetic s SET diagnosis = d.diagnosis
        FROM (SELECT id, 1 + floor(random() * %(n)d)::int AS donor FROM synthetic
              WHERE random() < 0.01) c JOIN synthetic d ON d.id = c.donor WHERE s.id = c.id"""),
    ("1 % left", "DELETE FROM synthetic WHERE random() < 0.01"),
    ("1 % joined (random rows' values)", """INSERT INTO synthetic SELECT 100000000 + c.g, d.age,
        d.zip, d.sex, d.segment, d.income, d.visit, d.diagnosis
        FROM (SELECT g, 1 + floor(random() * %(n)d)::int AS donor
              FROM generate_series(1, %(n)d / 100) g) c JOIN synthetic d ON d.id = c.donor"""),
]


#: the shapes that move known people across boxes, whose refresh runs
MOVING = {"everyone's age + 1", "0.1 % one QI set to a random row's",
          "1 % one QI set to a random row's", "1 % moved to a random row's 6 QIs"}


def vm_hwm(pid: int) -> float:
    """The backend's peak resident set (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def refreshed(conn, budget: str, release: str, sql: str, n: int, seed: float) -> dict:
    """The refresh at ``budget`` of ``release`` after ``sql`` (the shape, drawn with ``seed``)
    in a fresh backend, rolled back: seconds, CPU seconds, VmHWM, the refusal or the figures."""
    with fresh_backend(conn) as other:
        other.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        other.autocommit = False
        other.execute("SELECT setseed(%s)", (seed,))
        other.execute(sql % {"n": n})
        # the shape's own peak (an UPDATE of every row touches every shared buffer)
        out = {"refused": None, "hwm_before": vm_hwm(pid)}
        t0, cpu = time.perf_counter(), backend_cpu(pid)
        with MemorySampler(pid) as memory:
            try:
                other.execute("SELECT anon.refresh(%s)", (release,))
            except Exception as error:          # noqa: BLE001 - a refusal is a result here
                out["refused"] = f"{getattr(error, 'sqlstate', '')}: {error}"[:300]
        out["seconds"], out["cpu"] = time.perf_counter() - t0, backend_cpu(pid) - cpu
        out.update(hwm=vm_hwm(pid), anon=memory.anon, shmem=memory.shmem)
        if out["refused"] is None:
            ooc, across = other.execute(
                "SELECT metrics -> 'out_of_core', verification -> 'across_versions' FROM "
                "anon.releases WHERE format('%%I.%%I', release_schema, release_name) = %s",
                (release,)).fetchone()
            out.update(by_regions=bool(ooc and ooc.get("refreshed_by_regions")),
                       movers=(ooc or {}).get("movers"), below_l=across["below_l"],
                       fewest=across["fewest_candidates"], held_back=across["held_back"])
        other.rollback()
    return out


def main() -> None:
    n = int(os.environ.get("PLPY_ANON_STABLE_CHURN_ROWS", "1000000"))
    budget = os.environ.get("PLPY_ANON_STABLE_CHURN_BUDGET", "64MB")
    rows = []
    runs_of = []
    refreshes = os.environ.get("PLPY_ANON_STABLE_CHURN_REFRESH", "moving")
    with extension_db() as conn:
        load_synthetic(conn, n)
        with fresh_backend(conn) as other:
            other.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
            t0 = time.perf_counter()
            release = other.execute(CREATE % "stable", (K, L, QIS, "stable_churn")).fetchone()[0]
            print(f"{n:,} rows, stable create at {budget}: {time.perf_counter() - t0:.1f} s",
                  flush=True)
        for i, (shape, sql) in enumerate(SHAPES):
            with fresh_backend(conn) as other:
                other.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
                other.execute(PLAN_ONLY)
                pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
                other.autocommit = False
                other.execute("SELECT setseed(%s)", (0.1 + i / 100,))
                changed = other.execute(sql % {"n": n}).rowcount
                cpu = backend_cpu(pid)
                got = other.execute("SELECT pg_temp.stable_refresh_plan(%s)",
                                (release,)).fetchone()[0]
                cpu = backend_cpu(pid) - cpu
                other.rollback()
            runs = got["refused"] is None
            fits = got["largest_group_bytes"] <= got["room_bytes"]
            print(f"{shape}: {changed:,} rows changed; {json.dumps(got)}; plan CPU {cpu:.1f} s",
                  flush=True)
            if refreshes == "all" or refreshes == "moving" and shape in MOVING:
                run = refreshed(conn, budget, release, sql, n, 0.1 + i / 100)
                print(f"{shape}: refresh {json.dumps(run)}", flush=True)
                runs_of.append([shape, f"{got['movers']:,}", round(run["seconds"], 1),
                                round(run["cpu"], 1), round(run["hwm_before"]), round(run["hwm"]),
                                round(run["anon"]), round(run["shmem"]), budget,
                                run["refused"] or ("region by region" if run.get("by_regions")
                                                   else "in memory"),
                                run.get("below_l", ""), run.get("fewest", ""),
                                run.get("held_back", "")])
            rows.append([shape, f"{changed:,}", f"{got['movers']:,}", f"{got['waiting']:,}",
                         f"{got['joiners']:,}", got["merged_groups"], got["groups"],
                         f"{got['largest_group_regions']} / {got['regions']}",
                         f"{got['largest_group_rows']:,}",
                         f"{got['largest_group_bytes'] / 2**20:,.1f} / {got['room_bytes'] / 2**20:,.1f}",
                         "yes" if runs else "no (54000)", "yes" if fits else "no",
                         "{} / {:,}".format(*got["links_only_largest"]),
                         "{} / {:,}".format(*got["hull_once_largest"]), round(cpu, 1)])
    table = markdown_table(
        ["churn", "rows changed", "movers", "held back in another region's group", "joiners", "merged groups",
         "groups", "largest group's regions", "its rows", "its MiB / room MiB",
         "refresh runs", "largest group fits", "linked by people alone: regions / rows",
         "one hull step: regions / rows", "plan CPU s"], rows)
    refreshes = markdown_table(
        ["churn", "movers", "refresh s", "backend CPU s", "VmHWM before MiB", "VmHWM MiB",
         "peak RssAnon MiB", "peak RssShmem MiB", "budget", "refresh",
         "below l", "fewest candidates", "held back"], runs_of)
    print(table)
    print(refreshes)
    (results_dir() / "stable_churn.md").write_text(table + "\n\n" + refreshes + "\n")


if __name__ == "__main__":
    main()
