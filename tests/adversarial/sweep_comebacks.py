"""A sweep of tests/adversarial/test_stable_comebacks*.py's random sequences (not collected by
the suite: run it by name, with -s for its totals). Per seed, one JSON line (in $SWEEP_OUT, else
bench-results/sweep-<kind>-<seeds>.jsonl): whether a release could be created, refreshes, those
the release's check refused, versions of no rows, whether someone came back (with another
value), and the analyst's pins by intersection and by difference (people and values), true and
wrong, and the people his intersection leaves fewer than l values.

    SWEEP=heavy SEEDS=0-199 python -m pytest tests/adversarial/sweep_comebacks.py -q -s
    SWEEP=heavy_no_one SEEDS=0-199 ...   (the analyst follows no one)
    SWEEP=light SEEDS=0-199 ...          (test_stable_comebacks.py's lighter churn)
    SWEEP=wide SEEDS=30100-30399 ...     (people back with another value, wider k, l, sizes)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg

from tests.adversarial import test_stable_comebacks as comebacks
from tests.adversarial.test_stable_comebacks_wide_ranges import WideSequence
from tests.bench.common import results_dir
from tests.helpers import intersected_below_l, pinned_by_intersection


class _Refreshes:
    """``db`` with each refresh the release's check refuses counted."""

    def __init__(self, db):
        self.db, self.refused = db, 0

    def execute(self, query, *args, **kwargs):
        try:
            return self.db.execute(query, *args, **kwargs)
        except psycopg.errors.DataException:
            if isinstance(query, str) and query.startswith("SELECT anon.refresh("):
                self.refused += 1
            raise

    def __getattr__(self, name):
        return getattr(self.db, name)


def _one(db, schema, seed: int, kind: str) -> dict:
    counted = _Refreshes(db)
    if kind == "wide":
        sequence = WideSequence(counted, schema, seed, new_values=True)
    else:
        # "heavy_no_one": the analyst follows no one (a person back is a new person to him)
        sequence = comebacks.Sequence(counted, schema, seed, follows="" if kind == "heavy_no_one" else "c",
                                      heavy=kind.startswith("heavy"))
    came_back = {"c": 0, "value": 0}
    changed, churn = sequence.changed, sequence.churn

    def on_change(i, kind_):
        came_back["c"] += kind_ == "c"
        changed(i, kind_)
    sequence.changed = on_change
    if kind == "wide":
        def on_churn(release):
            before = dict(sequence.table)
            churn(release)
            came_back["value"] += sum(1 for i, r in sequence.table.items()
                                      if i not in before and i in sequence.truths_by_id
                                      and r[2] not in sequence.truths_by_id[i])
        sequence.truths_by_id = {}
        keep = sequence.keep

        def on_keep(release, rows=None):
            keep(release, rows)
            for i, r in sequence.table.items():
                sequence.truths_by_id.setdefault(i, set()).add(r[2])
        sequence.keep = on_keep
        sequence.churn = on_churn
    try:
        sequence.run()
    except (psycopg.errors.DataException, psycopg.errors.InvalidParameterValue):
        # no release can be created for it (a refused refresh is caught by run)
        if sequence.kept:
            raise
        db.execute("DROP TABLE pt")
        return {"seed": seed, "created": False}
    truth = (lambda p, v: v in sequence.truths[p]) if kind == "wide" else \
        (lambda p, v: sequence.truth[p] == v)
    by_intersection = pinned_by_intersection(sequence.kept)
    by_difference = {(p, v) for _, _, p, v, _ in sequence.pins}
    return {"seed": seed, "created": True, "refreshes": sequence.refreshes,
            "refused": counted.refused,
            "no_rows": sum(1 for kept in sequence.kept[1:] if not kept["classes"]),
            "came_back": came_back["c"], "back_with_another_value": came_back["value"],
            "intersection_true": sum(truth(p, v) for p, v in by_intersection.items()),
            "intersection_wrong": sum(not truth(p, v) for p, v in by_intersection.items()),
            "intersection_below_l": len(intersected_below_l(sequence.kept, sequence.l)),
            "difference_true": sum(truth(p, v) for p, v in by_difference),
            "difference_wrong": sum(not truth(p, v) for p, v in by_difference)}


def summary(lines: list[dict]) -> dict:
    """The sweep's totals: sequences a release could be created for, their refreshes, those
    with someone back (with another value), pins (true / wrong), refusals and versions of no
    rows (in how many sequences)."""
    made = [line for line in lines if line["created"]]

    def total(key):
        return sum(line[key] for line in made)
    return {"seeds": len(lines), "created": len(made), "refreshes": total("refreshes"),
            "with_comebacks": sum(1 for line in made if line["came_back"]),
            "back_with_another_value": sum(1 for line in made if line["back_with_another_value"]),
            "intersection": (total("intersection_true"), total("intersection_wrong")),
            "intersection_below_l": total("intersection_below_l"),
            "difference": (total("difference_true"), total("difference_wrong")),
            "refused": total("refused"),
            "no_rows": (total("no_rows"), sum(1 for line in made if line["no_rows"]))}


def test_sweep(db, schema):
    kind = os.environ.get("SWEEP", "heavy")
    low, high = (int(x) for x in os.environ["SEEDS"].split("-"))
    path = Path(os.environ.get("SWEEP_OUT") or results_dir() / f"sweep-{kind}-{low}-{high}.jsonl")
    lines = []
    with open(path, "w") as out:
        for seed in range(low, high + 1):
            lines.append(_one(db, schema, seed, kind))
            out.write(json.dumps(lines[-1]) + "\n")
            out.flush()
    print(json.dumps(summary(lines)))
