"""Experiment for issue 6 (not a test): trust- and purpose-aware releases of Adult (paper 001).

    /opt/plpy_anon/venv/bin/python tests/bench/bench_trust.py

Adult (ARX's 30,162 rows) with ARX's hierarchies. Quasi-identifiers: sex, age, race, education,
native-country, workclass, occupation; marital-status and salary-class are kept exact as the
labels of the two purposes' tasks.

* three requesters, whose trust comes from the trust evaluation (history + recommendations):
  low, medium, high; projection ``D = 1 - T**2``;
* two purposes: demographic (age 1, sex 0.9, race 0.8; task: predict marital-status) and business
  (education 1, occupation 0.9, workclass 0.8; task: predict salary-class); unlisted QIs get 0;
* two settings: the paper's scheme (levels from the decomposition only) and the same releases made
  5-anonymous (at most 5 % of the rows suppressed, then further generalization along the
  decomposition).

For each (setting, requester, purpose): D, the levels chosen, the cost of the k step, NCP per
attribute, and the 3-fold cross-validated accuracy of a logistic regression trained on the
release, for both tasks. Prints the tables; writes bench-results/trust.md and bench-results/trust.png.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder

from plpy_anon.core.degree import DegreeRelease
from plpy_anon.core.hierarchy import Hierarchy
from plpy_anon.core.purpose import MIPriorities
from plpy_anon.core.trust import TrustProjection, evaluate_trust

QIS = ["sex", "age", "race", "education", "native-country", "workclass", "occupation"]
PURPOSES = {
    "demographic": ({"age": 1.0, "sex": 0.9, "race": 0.8}, "marital-status"),
    "business": ({"education": 1.0, "occupation": 0.9, "workclass": 0.8}, "salary-class"),
}
# (good outcomes, bad outcomes, recommendation rating, recommender trust)
REQUESTERS = {
    "low": (2, 6, 0.2, 0.5),
    "medium": (6, 4, 0.6, 0.5),
    "high": (40, 1, 0.95, 0.9),
}
SETTINGS = {"paper (no k)": (None, 0.0), "k = 5": (5, 0.05)}
OUT = Path("bench-results")


def load(data_dir):
    frame = pd.read_csv(Path(data_dir) / "adult" / "adult.csv", sep=";")
    hierarchies = {name: Hierarchy.from_csv(Path(data_dir) / "adult" / "hierarchies" /
                                            f"adult_hierarchy_{name}.csv") for name in QIS}
    return frame, hierarchies


def trust_of(good, bad, rating, recommender_trust):
    outcomes = [1.0] * good + [0.0] * bad
    return evaluate_trust(outcomes, [0.0] * len(outcomes), [rating], [recommender_trust],
                          history_weight=0.7).trust


def accuracy(released, target):
    model = make_pipeline(OneHotEncoder(handle_unknown="ignore"), LogisticRegression(max_iter=500))
    features = released[QIS].astype(str)
    return float(cross_val_score(model, features, released[target], cv=3).mean())


def run(frame, hierarchies, setting):
    k, max_suppression = SETTINGS[setting]
    projection = TrustProjection(gamma=2.0)
    rows = []
    for requester, evidence in REQUESTERS.items():
        trust = trust_of(*evidence)
        degree = projection(trust)
        for purpose, (given, _) in PURPOSES.items():
            priorities = {name: given.get(name, 0.0) for name in QIS}
            start = time.perf_counter()
            release = DegreeRelease(degree, priorities, hierarchies=hierarchies, k=k,
                                    max_suppression=max_suppression).fit(frame)
            released = release.transform(frame)
            seconds = time.perf_counter() - start
            cost = release.cost_
            rows.append({
                "setting": setting, "requester": requester, "trust": trust, "D": degree, "purpose": purpose,
                "levels": " ".join(f"{n[:3]}{release.levels_[n]}" for n in QIS),
                "k step": f"+{sum(cost['extra_levels'].values())} lv, "
                          f"{cost['rows_suppressed']} rows",
                "release s": seconds,
                **{f"NCP {n}": cost["ncp"][n] for n in QIS},
                **{f"acc {task}": accuracy(released, target)
                   for task, (_, target) in PURPOSES.items()},
            })
    return pd.DataFrame(rows)


def baselines(frame):
    return {task: (accuracy(frame, target), float(frame[target].value_counts(normalize=True).max()))
            for task, (_, target) in PURPOSES.items()}


def derived_priorities(frame):
    model = MIPriorities(most="education", least="race").fit(frame[[*QIS, "salary-class"]])
    return model.priorities_.round(3)


def markdown(frame, index=False):
    """A GitHub table (pandas' to_markdown needs tabulate, which the environment lacks)."""
    frame = frame.reset_index() if index else frame
    cells = frame.map(lambda v: f"{v:.3f}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in cells.to_numpy()]
    return "\n".join(lines)


def write_outputs(table, base, mi):
    OUT.mkdir(exist_ok=True)
    lines = ["# Trust- and purpose-aware releases of Adult (issue 6)", "",
             "Projection D = 1 - T^2; settings: " + ", ".join(
                 f"{name} (k = {k}, max suppression {s:.0%})"
                 for name, (k, s) in SETTINGS.items()) + ".",
             "", markdown(table), "",
             "Original data / majority class: " + ", ".join(
                 f"{task} {acc:.3f} / {major:.3f}" for task, (acc, major) in base.items()), "",
             "MI-derived priorities (most = education, least = race):", "",
             markdown(mi.to_frame("priority"), index=True)]
    (OUT / "trust.md").write_text("\n".join(lines) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(SETTINGS), 2, figsize=(10, 4 * len(SETTINGS)), squeeze=False)
    for (setting, task), axis in zip(
            [(s, t) for s in SETTINGS for t in PURPOSES], axes.reshape(-1)):
        pivot = table[table["setting"] == setting].pivot(
            index="requester", columns="purpose", values=f"acc {task}")
        pivot.loc[list(REQUESTERS)].plot.bar(ax=axis, rot=0)
        axis.axhline(base[task][0], color="k", ls="--", lw=1, label="original")
        axis.axhline(base[task][1], color="grey", ls=":", lw=1, label="majority")
        axis.set_title(f"{setting} -- task: {task} ({PURPOSES[task][1]})")
        axis.set_ylabel("3-fold accuracy")
        low = min(base[task][1], pivot.min().min()) - 0.02
        axis.set_ylim(low, base[task][0] + 0.02)
        axis.legend(title="release purpose", fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "trust.png", dpi=120)


def main(argv):
    data_dir = os.environ.get("PLPY_ANON_DATA", "/work/shared/data")
    frame, hierarchies = load(data_dir)
    table = pd.concat([run(frame, hierarchies, setting) for setting in SETTINGS],
                      ignore_index=True)
    base = baselines(frame)
    mi = derived_priorities(frame)
    with pd.option_context("display.width", 200, "display.max_columns", 30,
                           "display.float_format", "{:.3f}".format):
        print(table[["setting", "requester", "trust", "D", "purpose", "levels", "k step", "release s",
                     "acc demographic", "acc business"]].to_string(index=False))
        print()
        print(table[["setting", "requester", "purpose", *[f"NCP {n}" for n in QIS]]].to_string(index=False))
    print("original / majority:", {t: tuple(round(v, 3) for v in b) for t, b in base.items()})
    print("MI-derived priorities (education -> race):", mi.to_dict())
    if "--no-files" not in argv:
        write_outputs(table, base, mi)
        print(f"wrote {OUT / 'trust.md'} and {OUT / 'trust.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
