"""CPU of the release check of the privacy models (core.privacy_models.ClassCheck) over a
sensitive column with a distinct value on every row (an id, an exact salary), classes of 5, per
model kind: ``python -m tests.bench model_check`` (rows from the arguments of ``main``, default
20k, 100k and 1M) prints seconds of process CPU per check."""
from __future__ import annotations

import sys
import time

import numpy as np

from plpy_anon.core.privacy_models import ClassCheck, Models

CLASS_SIZE = 5
KINDS = {"t ordered": {"t": 0.2, "ordered": True}, "t unordered": {"t": 0.2},
         "entropy l": {"l": 2.0, "l_diversity": "entropy"},
         "recursive (c,l)": {"l": 2, "l_diversity": "recursive", "c": 3.0},
         "distinct l + t ordered": {"l": 2, "t": 0.2, "ordered": True}}


def check_cpu(rows: int, kind: dict) -> tuple[float, int]:
    """(CPU seconds, failing classes) of one check of ``rows`` rows, one value each."""
    model = Models(table=np.full(rows, 1.0 / rows), **kind)
    check = ClassCheck(model, rows)
    started = time.process_time()
    check.add(np.arange(rows) // CLASS_SIZE, np.arange(rows), np.ones(rows), -(-rows // CLASS_SIZE))
    return time.process_time() - started, check.failing


def main(sizes=(20_000, 100_000, 1_000_000)) -> None:
    for rows in sizes:
        for name, kind in KINDS.items():
            cpu, failing = check_cpu(rows, kind)
            print(f"{rows:>9} rows  {name:<24} {cpu:7.2f} s CPU  ({failing} failing classes)",
                  flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or (20_000, 100_000, 1_000_000))
