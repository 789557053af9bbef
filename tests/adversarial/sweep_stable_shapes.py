"""A sweep of tests/adversarial/stable_shapes.py's random sequences (not collected by the suite:
run it by name, with -s for its totals). One JSON line per seed in $SWEEP_OUT (else
bench-results/sweep-shapes-<table>-<follows>-<seeds>.jsonl).

    SHAPES_TABLE=adult SHAPES_FOLLOWS=cqs SEEDS=0-99 python -m pytest tests/adversarial/sweep_stable_shapes.py -q -s
    SHAPES_TABLE=crx SHAPES_FOLLOWS= SEEDS=0-99 ...   (the analyst follows no one)
    SHAPES_HEAVY=1 ...        (longer sequences, more ops, up to 8 people flapping or moving,
                               joiners and whole classes among them)
    SHAPES_MODE=fresh ...     (the analysts' control: fresh refreshes, where they pin)
    SHAPES_REPLACE_AT=3 ...   (the release created anew, replace => true, at the third refresh)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from tests.adversarial.stable_shapes import Shape
from tests.bench.common import results_dir


def test_sweep(db, schema):
    table = os.environ.get("SHAPES_TABLE", "adult")
    follows = os.environ.get("SHAPES_FOLLOWS", "cqs")
    low, high = (int(x) for x in os.environ["SEEDS"].split("-"))
    path = Path(os.environ.get("SWEEP_OUT") or
                results_dir() / f"sweep-shapes-{os.environ.get('SHAPES_MODE', 'stable')}-{table}-{follows or 'none'}-{low}-{high}.jsonl")
    keys = ["refreshes", "refused", "people", "no_rows", "difference_true", "difference_wrong",
            "intersection_true", "intersection_wrong", "below_l", "both_true", "both_wrong",
            "finer_true", "finer_wrong"]
    totals = dict.fromkeys(keys, 0) | {"seeds": 0, "created": 0}
    with open(path, "w") as out:
        for seed in range(low, high + 1):
            shape = Shape(db, schema, seed, table, follows,
                         os.environ.get("SHAPES_MODE", "stable"),
                         bool(os.environ.get("SHAPES_HEAVY")))
            shape.replace_at = int(os.environ.get("SHAPES_REPLACE_AT", "0"))
            line = shape.run()
            out.write(json.dumps(line) + "\n")
            out.flush()
            totals["seeds"] += 1
            if line["created"]:
                totals["created"] += 1
                for key in keys:
                    totals[key] += line[key]
    print(json.dumps(totals))
