"""Benchmark of the Mondrian core (not a test): prints timings and utility figures.

    /opt/plpy_anon/venv/bin/python tests/bench/bench_partition.py [--quick]

1. UCI Adult (the 30,162 rows without '?'; QIs age, workclass, education_num, marital_status,
   occupation, race, sex, native_country; no hierarchies) for k in 5, 10, 25, 50, 100: encode
   seconds, fit seconds (best of 3), NCP %, C_DM, classes; then k = 10 with distinct 2-diversity
   on income.
2. Synthetic 1,000,000 rows x 6 QIs at k = 10: fit seconds and tracemalloc peak (MB) of the fit.

The data directory is ../shared/data beside the checkout unless the environment variable PLPY_ANON_DATA says
otherwise.
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.metrics import release_metrics
from plpy_anon.core.mondrian import Mondrian
from tests.bench.common import DATA

ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
    "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week",
    "native_country", "income",
]
NUMERIC_QIS = ["age", "education_num"]
CATEGORICAL_QIS = ["workclass", "marital_status", "occupation", "race", "sex", "native_country"]
QI_ORDER = ["age", "workclass", "education_num", "marital_status", "occupation", "race", "sex",
            "native_country"]


def load_adult(data_dir):
    frame = pd.read_csv(Path(data_dir) / "adult" / "adult.data", header=None,
                        names=ADULT_COLUMNS, skipinitialspace=True, na_values="?")
    return frame.dropna().reset_index(drop=True)


def encode_adult(frame):
    encoded = {name: encode_numeric(name, frame[name].to_numpy()) for name in NUMERIC_QIS}
    encoded.update({name: encode_categorical(name, frame[name].to_numpy())
                    for name in CATEGORICAL_QIS})
    return [encoded[name] for name in QI_ORDER]


def synthetic_columns(n_rows, seed=0):
    """6 QIs: age 0..99, zip (~2,000 values, skewed), sex, a 20-value category, income, a date."""
    rng = np.random.default_rng(seed)
    age = rng.integers(0, 100, n_rows)
    zip_code = (10000 + rng.zipf(1.3, n_rows) % 2000).astype(np.int64)
    sex = np.where(rng.random(n_rows) < 0.5, "F", "M").astype(object)
    category = np.array([f"c{i:02d}" for i in range(20)], dtype=object)[rng.integers(0, 20, n_rows)]
    income = np.round(rng.lognormal(10, 1, n_rows), 2)
    day = np.datetime64("1950-01-01") + rng.integers(0, 365 * 70, n_rows).astype("timedelta64[D]")
    return [
        encode_numeric("age", age),
        encode_numeric("zip", zip_code),
        encode_categorical("sex", sex),
        encode_categorical("category", category),
        encode_numeric("income", income),
        encode_numeric("birth_date", day),
    ]


def best_of(n, fn):
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def bench_adult(data_dir):
    frame = load_adult(data_dir)
    encode_s, columns = best_of(3, lambda: encode_adult(frame))
    print(f"Adult: {len(frame)} rows, {len(columns)} QIs, encode {encode_s:.4f} s")
    print(f"{'k':>4} {'fit s':>8} {'NCP %':>7} {'C_DM':>10} {'classes':>8} {'min |E|':>8}")
    for k in (5, 10, 25, 50, 100):
        fit_s, model = best_of(3, lambda k=k: Mondrian(k=k).fit(columns))
        m = release_metrics(columns, model.labels_, k)
        print(f"{k:>4} {fit_s:>8.4f} {m['ncp_percent']:>7.2f} {m['c_dm']:>10} "
              f"{m['n_classes']:>8} {m['achieved_k']:>8}")
    income = encode_categorical("income", frame["income"].to_numpy()).codes
    fit_s, model = best_of(3, lambda: Mondrian(k=10, l=2).fit(columns, income))
    m = release_metrics(columns, model.labels_, 10)
    print(f"k=10, l=2 (income): fit {fit_s:.4f} s, NCP {m['ncp_percent']:.2f} %, "
          f"C_DM {m['c_dm']}, classes {m['n_classes']}")


def bench_synthetic(n_rows):
    start = time.perf_counter()
    columns = synthetic_columns(n_rows)
    encode_s = time.perf_counter() - start
    data_mb = sum(c.codes.nbytes + c.labels.nbytes for c in columns) / 2**20
    fit_s, model = best_of(3, lambda: Mondrian(k=10).fit(columns))
    tracemalloc.start()
    Mondrian(k=10).fit(columns)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    m = release_metrics(columns, model.labels_, 10)
    print(f"Synthetic: {n_rows} rows x {len(columns)} QIs (encoded data {data_mb:.1f} MB), "
          f"encode {encode_s:.2f} s")
    print(f"k=10: fit {fit_s:.3f} s (best of 3), tracemalloc peak {peak / 2**20:.1f} MB, "
          f"NCP {m['ncp_percent']:.2f} %, classes {m['n_classes']}, min |E| {m['achieved_k']}")


def main(argv=()):
    data_dir = DATA
    bench_adult(data_dir)
    bench_synthetic(100_000 if "--quick" in argv else 1_000_000)


if __name__ == "__main__":
    main(sys.argv[1:])
