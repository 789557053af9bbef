"""Mondrian releases above ``plpy_anon.build_memory`` (plpy_anon/db/out_of_core.py): memory, time
and utility against the in-memory path, end to end through the extension.

The synthetic table of bench_mondrian.py (6 QIs age, zip, sex, segment, income, visit; sensitive
diagnosis; primary key id), made in SQL at each size of PLPY_ANON_OOC_SIZES (default
"1000000,10000000"), k = 10 (PLPY_ANON_OOC_K), each build in a fresh backend of one throwaway
cluster (shared_buffers 512MB, work_mem 64MB):

* 1M rows: the in-memory release (default budget) and the out-of-core one (budget
  PLPY_ANON_OOC_SMALL_BUDGET, default 64MB, which forces it): NCP of each (the releases' metrics)
  and their relative difference (target <= 2 %), seconds, VmHWM; the same for a prioritized
  release (priorities PLPY_ANON_OOC_PRIORITIES, JSON, default {"income": 1}; '' skips it);
* the release's privacy models: PLPY_ANON_OOC_MODELS, extra arguments of anon.mondrian_view
  (e.g. "t => 0.2", or "l => 2, l_diversity => 'entropy', refresh_mode => 'fresh'": with l, a
  table with a primary key is released in the stable mode by default, which runs in memory;
  default none), and its sensitive column PLPY_ANON_OOC_SENSITIVE (default diagnosis; a QI
  named there, e.g. age for t of a numeric column, is left out of the QIs);
* PLPY_ANON_OOC_RISK=1: each release's anon.risk_report in the building backend afterwards, with
  the build's budget (from its stored classes, then of a plain view over the release, whose rows
  are grouped), then with the default: seconds, the backend's CPU, VmHWM after each;
* larger sizes: the out-of-core release with a 512MB budget (PLPY_ANON_OOC_BUDGET; 2GB for the
  100M-row run): the backend's VmHWM (target < 1 GiB at 10M, <= 2 GiB at 100M; it counts the
  shared buffers the backend touched:
  RssShmem, sampled, beside the private RssAnon), end to end against ``CREATE TABLE AS`` of the
  source in the same run, verified from its rows, smallest class; the building backend's CPU
  against the copying one's (parallel workers' not counted in either), the build's phases
  (metrics.timing) and the run's steps (metrics.out_of_core.steps: the sample, each pass, each
  region's read, fit, publish, slices and write, wall and CPU), and the regions' private memory
  per row (the sampled peak RssAnon less the backend's before the regions, over the largest
  region's rows) beside the estimate that sized them (core.regions.row_bytes).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from plpy_anon.core.regions import row_bytes
from tests.bench.bench_coldstart import backend_cpu
from tests.bench.bench_mondrian import SYNTHETIC, MemorySampler, fresh_backend, vm_hwm_mib
from tests.bench.common import copy_seconds, extension_db, markdown_table, results_dir

#: the sensitive column and the models' arguments of every build (see the module doc)
SENSITIVE = os.environ.get("PLPY_ANON_OOC_SENSITIVE", "diagnosis")
MODELS = os.environ.get("PLPY_ANON_OOC_MODELS", "")
QIS = [q for q in ["age", "zip", "sex", "segment", "income", "visit"] if q != SENSITIVE]
#: k of every build (PLPY_ANON_OOC_K; a small k makes many classes, the write's and check's load)
K = int(os.environ.get("PLPY_ANON_OOC_K", "10"))
#: PLPY_ANON_OOC_RISK=1: after each build, anon.risk_report of the release in the same backend
#: (its VmHWM after the build and after the report printed)
RISK_REPORT = os.environ.get("PLPY_ANON_OOC_RISK", "") not in ("", "0")
#: PLPY_ANON_OOC_ONE_PASS: plpy_anon.regions_in_one_pass of each large build, in turn (e.g.
#: "off,on,off,on": A/B alternately on the same table; default: the setting's default, once)
ONE_PASS = [x for x in os.environ.get("PLPY_ANON_OOC_ONE_PASS", "").split(",") if x] or [None]


def children_cpu(pid: int) -> float:
    """CPU seconds of the exited children ``pid`` (the postmaster) waited for: the parallel
    workers' once they end (and any other process of the cluster that ended)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def load(conn, n: int) -> None:
    conn.execute("DROP TABLE IF EXISTS synthetic CASCADE")
    conn.execute(SYNTHETIC % {"n": n})
    conn.execute("ALTER TABLE synthetic ADD PRIMARY KEY (id)")
    conn.execute("VACUUM ANALYZE synthetic")


def build(conn, budget: str | None, name: str, priorities: str | None = None,
          one_pass: str | None = None) -> dict:
    """One anon.mondrian_view of ``synthetic`` in a fresh backend with ``budget`` (None: the
    default), prioritized by ``priorities`` (JSON) when given, plpy_anon.regions_in_one_pass
    ``one_pass`` when given: its figures."""
    with fresh_backend(conn) as other:
        if budget:
            other.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
        if one_pass:
            other.execute("SELECT set_config('plpy_anon.regions_in_one_pass', %s, false)",
                          (one_pass,))
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        postmaster = parent_of(pid)
        workers0 = children_cpu(postmaster)
        cpu0 = backend_cpu(pid)
        t0 = time.perf_counter()
        with MemorySampler(pid) as memory:
            release = other.execute(
                "SELECT anon.mondrian_view('synthetic', k => %s, quasi_identifiers => %s, "
                "sensitive => ARRAY[%s], release_name => %s, replace => true"
                + (f", {MODELS}" if MODELS else "")
                + (", priorities => %s::jsonb)" if priorities else ")"),
                (K, QIS, SENSITIVE, name, *([priorities] if priorities else []))).fetchone()[0]
        e2e = time.perf_counter() - t0
        cpu = backend_cpu(pid) - cpu0
        workers = children_cpu(postmaster) - workers0
        hwm = vm_hwm_mib(pid)
        report = None
        if RISK_REPORT:
            # the report an analyst asks for afterwards, in the same backend and session (its
            # build_memory still set), then with the default budget: the backend's peak after each
            # A compact release's report reads its stored classes; a plain view over it (its
            # QIs and sensitive column named) has its rows grouped: the same figures, A/B in the
            # same backend
            report = {}
            other.execute(f"CREATE OR REPLACE VIEW risk_plain AS SELECT * FROM {release}")
            for session in ("build's budget", "build's budget, the view's rows grouped",
                            "default budget"):
                if session == "default budget":
                    other.execute("RESET plpy_anon.build_memory")
                grouped = "grouped" in session
                t1, c1 = time.perf_counter(), backend_cpu(pid)
                with MemorySampler(pid) as report_memory:
                    figures = other.execute(
                        "SELECT count(*) FROM anon.risk_report(%s, %s, %s)",
                        ("risk_plain" if grouped else release, QIS if grouped else None,
                         [SENSITIVE] if grouped else None)).fetchone()[0]
                report[session] = {"seconds": time.perf_counter() - t1, "hwm": vm_hwm_mib(pid),
                                   "cpu": backend_cpu(pid) - c1, "anon": report_memory.anon}
                print(f"{name}: build VmHWM {hwm:.0f} MiB; anon.risk_report at the {session} "
                      f"{report[session]['seconds']:.1f} s, backend CPU "
                      f"{report[session]['cpu']:.1f} s, {figures} figures, VmHWM after it "
                      f"{report[session]['hwm']:.0f} MiB, peak RssAnon in it "
                      f"{report_memory.anon:.0f} MiB, peak RssShmem {report_memory.shmem:.0f} "
                      "MiB", flush=True)
            other.execute("DROP VIEW risk_plain")
    metrics, verified, smallest = conn.execute(
        "SELECT r.metrics, s.verified, (s.verification ->> 'smallest_class')::int "
        "FROM anon.releases r JOIN anon.release_status() s "
        "ON s.release = format('%%I.%%I', r.release_schema, r.release_name) "
        "WHERE s.release = %s", (release,)).fetchone()
    ooc = metrics.get("out_of_core")
    return {"release": release, "e2e": e2e, "cpu": cpu, "hwm": hwm, "workers": workers,
            "report": report,
            "phases": metrics.get("timing", {}).get("phases", {}), "ooc": ooc, "anon": memory.anon, "shmem": memory.shmem,
            "ncp": metrics["ncp_percent"], "classes": metrics["n_classes"],
            "verified": verified, "smallest": smallest,
            "regions": ooc["regions"] if ooc else "", "levels": len(ooc["levels"]) if ooc else "",
            "python": metrics["seconds"]["python_total"],
            "top_s": sum(level["seconds"] for level in ooc["levels"]) if ooc else "",
            "read_s": metrics["seconds"]["read"], "fit_s": metrics["seconds"]["partition"],
            # VmHWM when the last region was written: the peak before the check of the rows
            "hwm_regions": (metrics.get("memory_mib") or {}).get("regions", {}).get("peak", "")}


def row(n, what, budget, f, copy_s):
    return [f"{n:,}", what, budget or "default (1GB)", round(f["e2e"], 1), round(f["python"], 1),
            f["top_s"] and round(f["top_s"], 1), round(f["read_s"], 1), round(f["fit_s"], 1),
            round(copy_s, 2), round(f["e2e"] / copy_s, 1), round(f["hwm"]), f["hwm_regions"], round(f["anon"]),
            round(f["shmem"]), f["regions"], f["levels"], f["classes"], round(f["ncp"], 3),
            f["verified"], f["smallest"]]


def main() -> None:
    sizes = [int(x) for x in os.environ.get("PLPY_ANON_OOC_SIZES", "1000000,10000000").split(",") if x]
    small = os.environ.get("PLPY_ANON_OOC_SMALL_BUDGET", "64MB")
    large = os.environ.get("PLPY_ANON_OOC_BUDGET", "512MB")
    # at 1M rows, a prioritized release in memory and out of core too ('' skips it)
    prioritized = os.environ.get("PLPY_ANON_OOC_PRIORITIES", '{"income": 1}')
    rows, notes = [], []
    with extension_db() as conn:
        for n in sizes:
            t0 = time.perf_counter()
            load(conn, n)
            print(f"{n:,} rows loaded in {time.perf_counter() - t0:.1f} s", flush=True)
            cpu0 = backend_cpu(conn.info.backend_pid)
            copy_s = copy_seconds(conn, "synthetic")
            copy_cpu = backend_cpu(conn.info.backend_pid) - cpu0
            print(f"copy {copy_s:.2f} s, backend CPU {copy_cpu:.2f} s", flush=True)
            if n <= 1_000_000:
                mem = build(conn, None, "in_memory")
                ooc = build(conn, small, "out_of_core")
                rows += [row(n, "in memory", None, mem, copy_s), row(n, "out of core", small, ooc, copy_s)]
                diff = 100 * (ooc["ncp"] - mem["ncp"]) / mem["ncp"]
                notes.append(f"{n:,} rows: NCP in memory {mem['ncp']:.3f} %, out of core "
                             f"{ooc['ncp']:.3f} %: {diff:+.2f} % relative (target within 2 %)")
                conn.execute(f"SELECT anon.drop_release('{mem['release']}')")
                if prioritized:
                    mem = build(conn, None, "in_memory_prioritized", prioritized)
                    conn.execute(f"SELECT anon.drop_release('{ooc['release']}')")
                    ooc = build(conn, small, "out_of_core_prioritized", prioritized)
                    what = f"prioritized {prioritized}"
                    rows += [row(n, f"in memory, {what}", None, mem, copy_s),
                             row(n, f"out of core, {what}", small, ooc, copy_s)]
                    diff = 100 * (ooc["ncp"] - mem["ncp"]) / mem["ncp"]
                    notes.append(f"{n:,} rows, {what}: NCP in memory {mem['ncp']:.3f} %, out of "
                                 f"core {ooc['ncp']:.3f} %: {diff:+.2f} % relative (target within 2 %)")
                    conn.execute(f"SELECT anon.drop_release('{mem['release']}')")
            else:
                for one_pass in ONE_PASS:
                    ooc = build(conn, large, "out_of_core", one_pass=one_pass)
                    print(f"plpy_anon.regions_in_one_pass: {one_pass or 'default'}", flush=True)
                    print(profile(ooc, copy_s, copy_cpu), flush=True)
                    rows.append(row(n, "out of core" + (f", one pass {one_pass}" if one_pass else ""),
                                    large, ooc, copy_s))
                    target = "< 1024" if n <= 10_000_000 else "<= 2048"
                    notes.append(f"{n:,} rows, budget {large}: VmHWM {ooc['hwm']:.0f} MiB (target {target}), "
                                 f"private {ooc['anon']:.0f} MiB, shared buffers touched {ooc['shmem']:.0f} MiB, "
                                 f"{ooc['e2e']:.1f} s = {ooc['e2e'] / copy_s:.1f}x a copy ({copy_s:.2f} s), "
                                 f"backend CPU {ooc['cpu']:.1f} s = {ooc['cpu'] / copy_cpu:.1f}x the "
                                 f"copy's ({copy_cpu:.2f} s), the cluster's ended processes' "
                                 f"(parallel workers') CPU {ooc['workers']:.1f} s")
            conn.execute(f"SELECT anon.drop_release('{ooc['release']}')")
            print(markdown_table(HEADERS, rows[-4:] if n <= 1_000_000 else rows[-len(ONE_PASS):]),
                  flush=True)
            print(notes[-1], flush=True)
    text = ("## Out-of-core Mondrian, synthetic rows, 6 QIs, k = 10 (fresh backend per build)\n\n"
            + markdown_table(HEADERS, rows) + "\n\n" + "\n".join(f"* {x}" for x in notes) + "\n")
    print(text)
    (results_dir() / "out_of_core.md").write_text(text)


def profile(f: dict, copy_s: float, copy_cpu: float) -> str:
    """Where a build's wall clock went (its recorded phases, the top levels' passes), in seconds
    and copies, and its backend CPU against the copy's."""
    phases = ", ".join(f"{p} {s:.1f} s ({s / copy_s:.2f})" for p, s in
                       sorted(f["phases"].items(), key=lambda x: -x[1]) if s >= 0.05)
    lines = [(f"end to end {f['e2e']:.1f} s ({f['e2e'] / copy_s:.2f} copies), backend CPU "
              f"{f['cpu']:.1f} s ({f['cpu'] / copy_cpu:.2f} the copy's); phases: {phases}")]
    ooc = f["ooc"] or {}
    if ooc.get("resident_anon_bytes") is not None:
        # the largest region's private memory (the sampled peak less what the backend held
        # before the regions) per row, against the estimate that sized the regions
        region = f["anon"] * 2**20 - ooc["resident_anon_bytes"]
        lines.append(f"  budget {ooc['budget_bytes'] / 2**20:.0f} MiB, resident before the regions "
                     f"{ooc['resident_bytes'] / 2**20:.0f} MiB (private "
                     f"{ooc['resident_anon_bytes'] / 2**20:.0f}), region budget "
                     f"{ooc['region_budget_bytes'] / 2**20:.0f} MiB, {ooc['regions']} regions, the "
                     f"largest {ooc['largest_region_rows']:,} rows: peak private memory less the "
                     f"resident {region / 2**20:.0f} MiB = "
                     f"{region / max(ooc['largest_region_rows'], 1):.0f} bytes a row (estimated "
                     f"{row_bytes(len(QIS) + 1)})")
    if ooc.get("region_pass"):
        lines.append(f"  the regions' pass (in the first region's read): {ooc['region_pass']}")
    for i, level in enumerate(ooc.get("levels", [])):
        lines.append(f"  top level {i}: {level}")
    # the run's steps: wall and this backend's CPU (parallel workers' not counted)
    lines += [f"  {name}: {v['seconds']:.1f} s, CPU {v['cpu']:.1f} s" for name, v in
              sorted(ooc.get("steps", {}).items(), key=lambda x: -x[1]["seconds"])]
    return "\n".join(lines)


HEADERS = ["rows", "path", "build_memory", "end to end s", "Python s", "top levels (SQL) s",
           "read s (with the top levels)", "fit s", "copy s", "ratio to copy",
           "VmHWM MiB", "VmHWM after the regions MiB", "peak RssAnon MiB", "peak RssShmem MiB", "regions", "top levels",
           "classes", "NCP %", "verified", "smallest class"]


if __name__ == "__main__":
    main()
