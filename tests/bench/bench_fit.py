"""The Mondrian fit alone, compiled (numba) against numpy, beside a plain copy of the same table.

    python -m tests.bench fit          # PLPY_ANON_FIT_SIZES=1000000,10000000 (the default)

1. Synthetic tables of bench_mondrian (6 QIs: age, zip, sex, segment, income, visit; 1M made in
   SQL, 10M loaded from the file ``python -m tests.bench.bench_mondrian generate 10000000``
   writes): ``CREATE TABLE AS SELECT *`` seconds, then the QIs read once into this process and
   encoded as the database layer does (numeric, date, text codes), then ``Mondrian(k=10)`` fit
   seconds on each engine (compiled first, warmed by a small fit; the labels compared), and each
   fit's ratio to the copy; the copy is timed again after the fits and the smaller time is used;
   the number of interrupt checks of the compiled fit and the longest time between two (wall and
   process CPU: on a loaded machine the wall gap includes time spent waiting for a core).
   Target (issue: "fit alone <= 1.5x a copy"): the compiled fit <= 1.5x.
2. UCI Adult (30,162 rows, 8 QIs as bench_partition), k = 10: fit seconds after warm-up, best and
   median of 20, wall and process CPU, per engine. Target: <= 0.010 s.

Wall-clock on a shared machine: the load average and each fit's process CPU seconds are printed.
"""
from __future__ import annotations

import io
import os
import time

import numpy as np
import pandas as pd

from plpy_anon.core import mondrian_jit
from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.mondrian import Mondrian
from tests.bench.bench_mondrian import load_synthetic
from tests.bench.bench_partition import encode_adult, load_adult
from tests.bench.common import DATA, copy_seconds, extension_db, markdown_table, results_dir

TARGET_RATIO = 1.5
TARGET_ADULT_S = 0.010
QIS = ["age", "zip", "sex", "segment", "income", "visit"]


def sizes() -> list[int]:
    raw = os.environ.get("PLPY_ANON_FIT_SIZES", "1000000,10000000")
    return [int(x) for x in raw.split(",") if x.strip()]


def read_columns(conn):
    """The QIs as the database layer encodes them: numbers and dates numeric, text as codes."""
    buf = io.BytesIO()
    with conn.cursor().copy(f"COPY (SELECT {', '.join(QIS)} FROM synthetic) TO STDOUT") as copy:
        for block in copy:
            buf.write(block)
    buf.seek(0)
    frame = pd.read_csv(buf, sep="\t", header=None, names=QIS, na_values=["\\N"],
                        dtype={"zip": str, "sex": str, "segment": str}, parse_dates=["visit"])
    del buf
    return [encode_numeric("age", frame["age"].to_numpy()),
            encode_categorical("zip", frame["zip"].to_numpy(dtype=object)),
            encode_categorical("sex", frame["sex"].to_numpy(dtype=object)),
            encode_categorical("segment", frame["segment"].to_numpy(dtype=object)),
            encode_numeric("income", frame["income"].to_numpy()),
            encode_numeric("visit", frame["visit"].to_numpy().astype("datetime64[D]"))]


def fit_seconds(columns, engine, k=10, gaps=None):
    """(wall s, CPU s, labels); ``gaps``: a list that receives the wall seconds between the
    compiled fit's interrupt checks (its chunks)."""
    model = Mondrian(k=k, engine=engine)
    if gaps is not None:
        last = [time.perf_counter(), time.process_time()]

        def check():
            now = time.perf_counter(), time.process_time()
            gaps.append((now[0] - last[0], now[1] - last[1]))
            last[:] = now
        model.check_interrupt = check
    t0, c0 = time.perf_counter(), time.process_time()
    labels = model.fit(columns).labels_
    return time.perf_counter() - t0, time.process_time() - c0, labels


def bench_size(conn, n) -> list | None:
    if not load_synthetic(conn, n):
        return None
    first_copy = copy_seconds(conn, "synthetic")
    columns = read_columns(conn)
    gaps = []
    compiled_s, compiled_cpu, compiled = fit_seconds(columns, "numba", gaps=gaps)
    numpy_s, numpy_cpu, by_numpy = fit_seconds(columns, "numpy")
    same = bool(np.array_equal(compiled, by_numpy))
    del compiled, by_numpy
    copy_s = min(first_copy, copy_seconds(conn, "synthetic"))
    load = os.getloadavg()[0]
    longest_wall = max((wall for wall, _ in gaps), default=0.0)
    longest_cpu = max((cpu for _, cpu in gaps), default=0.0)
    print(f"{n:,} rows: copy {copy_s:.2f} s; fit compiled {compiled_s:.2f} s "
          f"({compiled_s / copy_s:.2f}x the copy, target <= {TARGET_RATIO}x; CPU {compiled_cpu:.2f}"
          f" s), numpy {numpy_s:.2f} s ({numpy_s / copy_s:.2f}x; CPU {numpy_cpu:.2f} s); "
          f"labels identical: {same}; {len(gaps)} interrupt checks, longest gap "
          f"{longest_wall:.3f} s wall, {longest_cpu:.3f} s CPU; load average {load:.1f}",
          flush=True)
    return [n, round(copy_s, 2), round(compiled_s, 2), round(compiled_s / copy_s, 2), TARGET_RATIO,
            round(numpy_s, 2), round(numpy_s / copy_s, 2), same, len(gaps),
            round(longest_wall, 3), round(longest_cpu, 3), round(load, 1)]


def bench_adult() -> list[list]:
    columns = encode_adult(load_adult(DATA))
    rows = []
    for engine in ("numba", "numpy"):
        Mondrian(k=10, engine=engine).fit(columns)                 # warm-up (loads the kernels)
        runs = [fit_seconds(columns, engine)[:2] for _ in range(20)]
        wall, cpu = (np.array([r[i] for r in runs]) * 1000 for i in (0, 1))
        print(f"Adult k = 10, {engine}: best {wall.min():.1f} ms, median {np.median(wall):.1f} ms "
              f"(target <= {TARGET_ADULT_S * 1000:.0f} ms); process CPU best {cpu.min():.1f} ms, "
              f"median {np.median(cpu):.1f} ms; load average {os.getloadavg()[0]:.1f}", flush=True)
        rows.append([engine, round(wall.min(), 1), round(float(np.median(wall)), 1),
                     round(cpu.min(), 1), round(float(np.median(cpu)), 1), TARGET_ADULT_S * 1000])
    return rows


def main() -> None:
    if mondrian_jit.kernels() is None:
        print("numba cannot be imported: nothing to compare")
        return
    Mondrian(k=2, engine="numba").fit([encode_numeric("x", np.arange(10))])   # load the kernels
    adult_rows = bench_adult()
    with extension_db() as conn:
        size_rows = [r for r in (bench_size(conn, n) for n in sizes()) if r]
    t1 = markdown_table(["engine", "best ms", "median ms", "CPU best ms", "CPU median ms",
                         "target ms"], adult_rows)
    t2 = markdown_table(["rows", "CREATE TABLE AS s", "fit compiled s", "ratio", "target ratio",
                         "fit numpy s", "ratio numpy", "labels identical", "interrupt checks",
                         "longest gap s", "longest gap CPU s", "load average"],
                        size_rows)
    text = f"## Adult, k = 10, fit alone\n\n{t1}\n\n## Synthetic, k = 10, fit alone\n\n{t2}\n"
    (results_dir() / "fit.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
