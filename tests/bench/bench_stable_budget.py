"""A stable release of the synthetic table under ``plpy_anon.build_memory``: create, then a
refresh after 1 % of the people left and as many joined, each in a fresh backend (its VmHWM,
sampled peak RssAnon and seconds), with the default budget and with a small one; the release's
state (anon.release_state: its rows and the largest row's bytes) and the release verified from
its rows (smallest class, fewest distinct sensitive values in a class, fewest candidates across
the versions). A budget below the table's estimate creates the stable release region by region
(db/stable_regions.py) and refreshes it region by region where no person moved box (the churn
here: leavers, and joiners with the leavers' values); a refused refresh (54000) shows the
refusal's seconds and VmHWM (its DETAIL printed), and the next row the same refresh of the same
state in memory at the default budget. Run with the default budget beside (",64MB") for the
in-memory creation and refresh of the same table and churn. The backend's CPU seconds (/proc/<pid>/stat) beside each. A creation refused shows the refusal, and the next row the same table
released in the fresh mode at that budget (out of core), verified from its rows the same way.

PLPY_ANON_STABLE_BUDGET_ROWS (default 1000000), PLPY_ANON_STABLE_BUDGETS (default ",64MB": ''
is the default budget); k = 10, l = 2, the 6 QIs of bench_out_of_core, sensitive diagnosis,
identifier id (the primary key).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

from tests.bench.bench_mondrian import MemorySampler, fresh_backend, load_synthetic, vm_hwm_mib
from tests.bench.common import copy_seconds, extension_db, markdown_table, results_dir

QIS = ["age", "zip", "sex", "segment", "income", "visit"]
K, L, CHURN = 10, 2, 0.01


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) backend ``pid`` has used (/proc/<pid>/stat, 10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_call(conn, budget: str, sql: str, args: tuple) -> dict:
    """``sql`` in a fresh backend with ``budget`` ('': the default): its result, seconds, the
    backend's CPU seconds, VmHWM and peak RssAnon (a refusal: its SQLSTATE and detail)."""
    with fresh_backend(conn) as other:
        if budget:
            other.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        t0, cpu = time.perf_counter(), backend_cpu(pid)
        detail = None
        with MemorySampler(pid) as memory:
            try:
                result, refused = other.execute(sql, args).fetchone()[0], None
            except psycopg.Error as error:     # a stable release over the budget: 54000
                result, refused = None, error.sqlstate
                detail = error.diag.message_detail or error.diag.message_primary
        seconds = time.perf_counter() - t0
        return {"result": result, "refused": refused, "seconds": seconds,
                "cpu": backend_cpu(pid) - cpu, "hwm": vm_hwm_mib(pid), "anon": memory.anon,
                "detail": detail}


def churn(conn) -> None:
    """1 % of the people leave; as many join (the leavers' values under new ids)."""
    conn.execute(f"SELECT setseed(0.5); WITH g AS (DELETE FROM synthetic WHERE random() < {CHURN} "
                 "RETURNING *) INSERT INTO synthetic SELECT g.id + 100000000, g.age, g.zip, g.sex, "
                 "g.segment, g.income, g.visit, g.diagnosis FROM g")
    conn.execute("ANALYZE synthetic")


def state_figures(conn, release: str) -> tuple[int, int]:
    """(rows of anon.release_state, the largest row's bytes) of ``release``."""
    return conn.execute(
        "SELECT count(*), max(pg_column_size(s.*)) FROM anon.release_state s JOIN anon.releases r "
        "USING (release_id) WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s",
        (release,)).fetchone()


def verified(conn, release: str) -> tuple:
    """(smallest class, fewest distinct values in a class) from the released rows, and the
    fewest candidates across the versions (anon.release_status; None in the fresh mode)."""
    qis = ", ".join(QIS)
    smallest, fewest = conn.execute(
        f"SELECT min(n), min(d) FROM (SELECT count(*) AS n, count(DISTINCT diagnosis) AS d "
        f"FROM {release} GROUP BY {qis}) AS c").fetchone()
    across = conn.execute("SELECT verification -> 'across_versions' FROM anon.release_status() "
                          "WHERE release = %s", (release,)).fetchone()[0] or {}
    return smallest, fewest, across.get("fewest_candidates")


CREATE = ("SELECT anon.mondrian_view('synthetic', k => %%s, l => %%s, quasi_identifiers => %%s, "
          "sensitive => ARRAY['diagnosis'], identifiers => ARRAY['id'], refresh_mode => '%s', "
          "release_name => %%s, replace => true)")


def refused_rows(conn, n: int, budget: str, copy: float, create: dict) -> list[list]:
    """The stable release's refusal at ``budget``, then the fresh release of the same table at
    that budget (out of core), verified from its rows."""
    fresh = timed_call(conn, budget, CREATE % "fresh", (K, L, QIS, f"fresh_{budget}".lower()))
    smallest, fewest, _ = verified(conn, fresh["result"])
    assert smallest >= K and fewest >= L, (smallest, fewest)
    regions = conn.execute(
        "SELECT metrics -> 'out_of_core' ->> 'regions' FROM anon.releases WHERE "
        "format('%%I.%%I', release_schema, release_name) = %s", (fresh["result"],)).fetchone()[0]
    out = []
    for mode, step, f in (("stable", f"create refused ({create['refused']})", create),
                          ("fresh", f"create, out of core ({regions} regions)", fresh)):
        print(f"{n:,} rows, budget {budget}, {mode} {step}: {f['seconds']:.1f} s "
              f"({f['seconds'] / copy:.1f}x the copy), VmHWM {f['hwm']:.0f} MiB, peak RssAnon "
              f"{f['anon']:.0f} MiB", flush=True)
        ok = mode == "fresh"
        out.append([f"{n:,}", budget, mode, step, round(f["seconds"], 1), round(f["cpu"], 1), round(copy, 2),
                    round(f["hwm"]), round(f["anon"]), "", "", smallest if ok else "",
                    fewest if ok else "", ""])
    return out


def regions_of(conn, release: str):
    """The regions a release was built in (None: in memory)."""
    return conn.execute("SELECT metrics -> 'out_of_core' ->> 'regions' FROM anon.releases WHERE "
                        "format('%%I.%%I', release_schema, release_name) = %s", (release,)).fetchone()[0]


def phases(conn, release: str) -> str:
    """The largest phases of the release's last create or refresh (metrics.timing), seconds."""
    got = conn.execute("SELECT metrics -> 'timing' -> 'phases' FROM anon.releases WHERE "
                       "format('%%I.%%I', release_schema, release_name) = %s", (release,)).fetchone()[0]
    top = sorted((got or {}).items(), key=lambda item: -item[1])[:8]
    return ", ".join(f"{name} {seconds:.1f}" for name, seconds in top)


def memory_of(conn, release: str):
    """The backend's resident memory and its peak so far at the run's marks (metrics.memory_mib:
    after the last region for a run region by region), MiB."""
    return conn.execute("SELECT metrics -> 'memory_mib' FROM anon.releases WHERE "
                        "format('%%I.%%I', release_schema, release_name) = %s", (release,)).fetchone()[0]


def main() -> None:
    n = int(os.environ.get("PLPY_ANON_STABLE_BUDGET_ROWS", "1000000"))
    budgets = os.environ.get("PLPY_ANON_STABLE_BUDGETS", ",64MB").split(",")
    rows = []
    with extension_db() as conn:
        for budget in budgets:
            load_synthetic(conn, n)
            copy = copy_seconds(conn, "synthetic")
            name = f"stable_{budget or 'default'}".lower()
            create = timed_call(conn, budget, CREATE % "stable", (K, L, QIS, name))
            if create["refused"]:
                rows.extend(refused_rows(conn, n, budget, copy, create))
                continue
            release = create["result"]
            created = (state_figures(conn, release), verified(conn, release), regions_of(conn, release))
            print(f"create's phases (s): {phases(conn, release)}; memory (MiB): "
                  f"{memory_of(conn, release)}", flush=True)
            churn(conn)
            refresh = timed_call(conn, budget, "SELECT anon.refresh(%s)", (release,))
            steps = [("create", create, created)]
            if refresh["refused"]:
                # the refusal's DETAIL, then the same refresh of the same state in memory, at
                # the default budget
                print(f"refresh refused at {budget}: {refresh['detail']}", flush=True)
                steps.append(("refresh", refresh, (state_figures(conn, release),
                                                   verified(conn, release), regions_of(conn, release))))
                refresh = timed_call(conn, "", "SELECT anon.refresh(%s)", (release,))
                steps.append(("refresh in memory (default budget)", refresh,
                              (state_figures(conn, release), verified(conn, release), None)))
            else:
                print(f"refresh's phases (s): {phases(conn, release)}; memory (MiB): "
                      f"{memory_of(conn, release)}", flush=True)
                steps.append(("refresh", refresh, (state_figures(conn, release),
                                                   verified(conn, release), regions_of(conn, release))))
            for step, f, ((state_rows, largest), (smallest, fewest, candidates), regions) in steps:
                if f["refused"]:
                    step = f"{step} refused ({f['refused']})"
                else:
                    assert smallest >= K and fewest >= L and candidates >= L, (smallest, fewest, candidates)
                    step += f", region by region ({regions} regions)" if regions else \
                        ("" if "in memory" in step else ", in memory")
                print(f"{n:,} rows, budget {budget or 'default'}, stable {step}: {f['seconds']:.1f} s "
                      f"(backend CPU {f['cpu']:.1f} s; {f['seconds'] / copy:.1f}x the copy), "
                      f"VmHWM {f['hwm']:.0f} MiB, peak RssAnon {f['anon']:.0f} MiB; state "
                      f"{state_rows} rows, largest {largest / 2**20:.1f} MiB", flush=True)
                ok = not f["refused"]
                rows.append([f"{n:,}", budget or "default (1GB)", "stable", step, round(f["seconds"], 1),
                             round(f["cpu"], 1), round(copy, 2), round(f["hwm"]), round(f["anon"]),
                             state_rows if ok else "", round(largest / 2**20, 1) if ok else "",
                             smallest if ok else "", fewest if ok else "", candidates if ok else ""])
    table = markdown_table(["rows", "build_memory", "mode", "step", "s", "backend CPU s", "copy s", "VmHWM MiB",
                            "peak RssAnon MiB", "state rows", "largest state row MiB",
                            "smallest class", "fewest values", "fewest candidates"], rows)
    print(table)
    (results_dir() / "stable_budget.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
