"""The soak (tests/soak.py): 8 writers create, replace, refresh (``anon.refresh`` and plain
``REFRESH MATERIALIZED VIEW``) and drop six shared releases of three tables while 2 analysts read
them at REPEATABLE READ. Targets: 0 deadlocks, 0 empty reads, 0 unclean errors.

PLPY_ANON_SOAK_SECONDS (default 120) sets its length. Each deadlock the server logged is printed
with its DETAIL (which statements waited for which locks)."""
from __future__ import annotations

import os
import re

import psycopg

from plpy_anon.cluster import ThrowawayCluster
from tests.bench.common import results_dir
from tests.soak import Soak, setup


def soak(seconds: float, cluster_log: list[str] | None = None) -> Soak:
    """Run the soak in a throwaway cluster; ``cluster_log`` receives the server's log lines."""
    with ThrowawayCluster(settings={"max_connections": "40"}) as cluster:
        def connect(**overrides):
            params = {"conninfo": cluster.dsn(overrides.pop("dbname", "postgres")), "autocommit": True}
            return psycopg.connect(**params, **overrides)
        with connect() as conn:
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            conn.execute("CREATE ROLE soak_analyst LOGIN")
            conn.execute("SELECT anon.grant_analyst('soak_analyst')")
            setup(conn, "public")
        result = Soak(connect, "public", "release", "soak_analyst").run(seconds)
        if cluster_log is not None:
            cluster_log.extend((cluster.root / "server.log").read_text(errors="replace").splitlines())
        return result


def deadlock_reports(log: list[str]) -> list[str]:
    """The server's deadlock reports: the ERROR line and the DETAIL lines after it."""
    reports, current = [], None
    for line in log:
        if "deadlock detected" in line:
            current = [line]
            reports.append(current)
        elif current is not None and re.search(r"\b(DETAIL|HINT|CONTEXT|STATEMENT|Process \d+)", line) or current is not None and line.startswith("\t"):
            current.append(line)
        else:
            current = None
    return ["\n".join(r) for r in reports]


def main() -> None:
    seconds = float(os.environ.get("PLPY_ANON_SOAK_SECONDS", "120"))
    log: list[str] = []
    result = soak(seconds, log)
    deadlocks = result.by_sqlstate().get("40P01", 0)
    print(f"soak, {seconds:.0f} s: {result.summary()}")
    print(f"soak: deadlocks {deadlocks} (target 0), empty reads {result.empty_reads} (target 0), "
          f"unclean errors {len(result.failures)} (target 0)")
    for failure in result.failures[:10]:
        print("   ", failure)
    for report in deadlock_reports(log)[:5]:
        print(report)
    out = results_dir() / "soak.md"
    out.write_text(f"# Soak ({seconds:.0f} s)\n\n{result.summary()}\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
