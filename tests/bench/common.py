"""Shared pieces of the benchmarks: data sets, a throwaway cluster with the extension, output."""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pandas as pd
import psycopg

from plpy_anon.cluster import ThrowawayCluster
from tests.helpers import load_python_stack

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("PLPY_ANON_DATA", ROOT.parent / "shared" / "data"))
RESULTS = Path(os.environ.get("PLPY_ANON_RESULTS", ROOT / "bench-results"))

ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
                 "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
                 "hours_per_week", "native_country", "income"]


#: adult.data as shipped in the package (plpy_anon/data/samples/README.md), for a plain clone
ADULT_IN_REPO = ROOT / "plpy_anon" / "data" / "samples" / "adult.data.gz"


def adult_path() -> Path:
    path = DATA / "adult" / "adult.data"
    return path if path.exists() else ADULT_IN_REPO


def adult() -> pd.DataFrame:
    """UCI Adult, the 30,162 rows of adult.data without '?'."""
    path = adult_path()
    if not path.exists():
        raise SystemExit(f"benchmark data not found at {path}; set PLPY_ANON_DATA to ../shared/data")
    df = pd.read_csv(path, header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                     na_values="?", keep_default_na=False)
    return df.dropna().reset_index(drop=True)


def results_dir() -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    return RESULTS


@contextlib.contextmanager
def extension_db(settings: dict[str, str] | None = None):
    """A throwaway cluster with the extension installed; yields an autocommit connection."""
    settings = {"shared_buffers": "'512MB'", "work_mem": "'64MB'",
                "maintenance_work_mem": "'256MB'", **(settings or {})}
    with ThrowawayCluster(settings=settings) as cluster, \
            psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION plpy_anon CASCADE")
        load_python_stack(conn)                                  # pay the imports once
        yield conn


def copy_frame(conn, table: str, df: pd.DataFrame, types: dict[str, str]) -> None:
    """CREATE TABLE with the given column types and COPY the frame into it."""
    cols = ", ".join(f'"{c}" {types[c]}' for c in df.columns)
    conn.execute(f'CREATE TABLE "{table}" ({cols})')
    with conn.cursor().copy(f'COPY "{table}" FROM STDIN') as copy:
        for row in df.itertuples(index=False):
            copy.write_row(row)
    conn.execute(f'ANALYZE "{table}"')


def copy_seconds(conn, table: str) -> float:
    """Seconds of a plain copy of ``table`` (``CREATE TABLE AS``): the yardstick every ratio of
    the benchmarks is taken against, in the same run."""
    t0 = time.perf_counter()
    conn.execute(f"CREATE TABLE {table}_copy AS SELECT * FROM {table}")
    took = time.perf_counter() - t0
    conn.execute(f"DROP TABLE {table}_copy")
    return took


def timed(fn, *args, repeat: int = 1, **kwargs):
    """(best seconds over ``repeat`` runs, last result)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return best, result


def markdown_table(headers: list[str], rows: list[list]) -> str:
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(out)
