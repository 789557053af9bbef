"""Experiment of issue 4 (paper 003), not a test: Break-Merge, Bayesian-network leak detection and
knowledge-breach probabilities on UCI Adult.

    /opt/plpy_anon/venv/bin/python tests/bench/bench_breakmerge.py [--quick]

Adult, the 30,162 rows without '?', QIs age, sex, race, native_country (the paper's age, gender and
a location-like attribute, plus race), sensitive workclass, marital_status, income. For 30,162 rows
and Adult replicated (row-tiled) to 100,000 and 1,000,000 rows, with a Mondrian k = 5 partition and
distinct l = 2 (income has two values, so l = 2 is the largest possible):

* seconds to learn the Bayesian network (BIC hill climbing) on the plain generalized release, and
  on the Break-Merge release (the weighted QIT |x| ST merge);
* seconds to break (BreakMerge.fit: group map, l-diversity merges, the three STs);
* dependency rules at risk 0.9 (QI -> SA rules in particular) before and after;
* knowledge-breach probabilities (max / mean / individuals >= 0.5) before and after;
* the attack of the issue's point 5: success rate of an adversary who knows a target's QIs and
  its workclass and guesses marital_status or income.

Prints Markdown tables, and writes bench-results/breakmerge.md and bench-results/breakmerge.png.
``--quick`` runs the 30,162-row size only. PLPY_ANON_DATA overrides /work/shared/data.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from plpy_anon.core.bayesnet import BayesNet
from plpy_anon.core.breach import attack_break_merge, attack_plain, break_merge_breach, plain_breach
from plpy_anon.core.breakmerge import BreakMerge, merge_tables, relabel_in_order
from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.generalize import class_bounds
from plpy_anon.core.mondrian import Mondrian

ADULT_COLUMNS = [
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "native_country",
    "income",
]
QIS = ["age", "sex", "race", "native_country"]
SENSITIVE = ["workclass", "marital_status", "income"]
K, L, RISK, THRESHOLD = 5, 2, 0.9, 0.5
SIZES = [30_162, 100_000, 1_000_000]
RESULTS = Path("bench-results")


def load_adult(data_dir):
    frame = pd.read_csv(
        Path(data_dir) / "adult" / "adult.data",
        header=None,
        names=ADULT_COLUMNS,
        skipinitialspace=True,
        na_values="?",
    )
    return frame.dropna().reset_index(drop=True)


def replicate(frame, n_rows):
    return frame.iloc[np.arange(n_rows) % len(frame)].reset_index(drop=True)


def generalize(frame, labels, n_classes, columns):
    """Per row, its class's generalized QIs as text: '[lo-hi]' ranges, '{a,b}' value sets."""
    bounds = class_bounds(columns, labels, n_classes)
    out = {}
    for col in columns:
        b = bounds[col.name]
        if col.kind == "numeric":
            text = np.where(
                b.lo == b.hi,
                b.lo.astype(int).astype(str),
                np.char.add(
                    np.char.add(np.char.add("[", b.lo.astype(int).astype(str)), "-"),
                    np.char.add(b.hi.astype(int).astype(str), "]"),
                ),
            )
        else:
            text = np.array([v[0] if len(v) == 1 else "{" + ",".join(v) + "}" for v in b])
        out[col.name] = text[labels]
    return pd.DataFrame(out)


def partition(frame):
    columns = [encode_numeric("age", frame["age"].to_numpy())] + [
        encode_categorical(c, frame[c].to_numpy()) for c in QIS[1:]
    ]
    mondrian = Mondrian(k=K).fit(columns)
    released = generalize(frame, mondrian.labels_, mondrian.n_classes_, columns)
    return mondrian.labels_, released


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def qi_to_sa_rules(rules):
    """Rules whose antecedent holds a QI and whose consequent is a sensitive attribute."""
    if rules.empty:
        return rules
    has_qi = rules["parents"].map(lambda ps: any(p in QIS for p in ps))
    return rules[has_qi & rules["child"].isin(SENSITIVE)]


def run_size(adult, n_rows):
    frame = replicate(adult, n_rows)
    (labels, released), t_mondrian = timed(partition, frame)
    labels = relabel_in_order(labels, released)
    plain = pd.concat([released, frame[SENSITIVE]], axis=1)
    bn_plain, t_bn = timed(BayesNet(tiers=[QIS, SENSITIVE]).fit, plain)
    broken, t_break = timed(BreakMerge(l=L, k=K).fit, labels, frame[SENSITIVE])
    qit = released.assign(gid=broken.gid_)
    merged, t_merge = timed(merge_tables, qit, broken.sensitive_tables_)
    bn_bm, t_bn_bm = timed(
        BayesNet(tiers=[QIS, SENSITIVE]).fit,
        merged[QIS + SENSITIVE],
        sample_weight=merged["weight"].to_numpy(),
    )
    rules_plain = bn_plain.dependency_rules(RISK, min_support=K)
    rules_bm = bn_bm.dependency_rules(RISK, min_support=K)
    breach = compare_breach(labels, frame, broken)
    attack = {
        target: (
            attack_plain(plain, plain, QIS, "workclass", target).mean(),
            attack_break_merge(
                qit, broken.sensitive_tables_, plain, QIS, "workclass", target
            ).mean(),
        )
        for target in ("marital_status", "income")
    }
    return {
        "rows": n_rows,
        "classes": int(labels.max() + 1),
        "gids": int(broken.group_sizes_.size),
        "merged": broken.n_merged_,
        "largest_gid": int(broken.group_sizes_.max()),
        "t_mondrian": t_mondrian,
        "t_bn_plain": t_bn,
        "t_break": t_break,
        "t_merge": t_merge,
        "t_bn_bm": t_bn_bm,
        "edges_plain": bn_plain.edges_,
        "edges_bm": bn_bm.edges_,
        "rules_plain": rules_plain,
        "rules_bm": rules_bm,
        "breach": breach,
        "attack": attack,
    }


def compare_breach(labels, frame, broken):
    before = plain_breach(labels, frame[SENSITIVE], threshold=THRESHOLD)
    after = break_merge_breach(broken.group_sizes_, broken.sensitive_tables_, threshold=THRESHOLD)
    key = ["target", "known"]
    before["known"] = before["known"].fillna("-")
    after["known"] = after["known"].fillna("-")
    return before.merge(after, on=key, suffixes=("_plain", "_bm"))


def markdown(frame, floatfmt="{:.3f}"):
    cells = frame.map(lambda v: floatfmt.format(v) if isinstance(v, float) else str(v))
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(row) + " |" for row in cells.to_numpy().tolist()]
    return "\n".join([head, rule, *body])


def timing_table(results):
    return pd.DataFrame(
        [
            {
                "rows": r["rows"],
                "classes": r["classes"],
                "gids after merge": r["gids"],
                "largest gid": r["largest_gid"],
                "mondrian s": r["t_mondrian"],
                "BN plain s": r["t_bn_plain"],
                "break s": r["t_break"],
                "merge view s": r["t_merge"],
                "BN Break-Merge s": r["t_bn_bm"],
            }
            for r in results
        ]
    )


def rules_table(result):
    rows = []
    for name, rules in (("plain", result["rules_plain"]), ("Break-Merge", result["rules_bm"])):
        qs = qi_to_sa_rules(rules)
        rows.append(
            {
                "release": name,
                "rules >= 0.9": len(rules),
                "QI -> SA rules": len(qs),
                "QI -> SA support": float(qs["support"].sum()) if len(qs) else 0.0,
                "strongest QI -> SA": _describe(qs.iloc[0]) if len(qs) else "-",
            }
        )
    return pd.DataFrame(rows)


def _describe(rule):
    lhs = ", ".join(f"{p}={v}" for p, v in zip(rule["parents"], rule["parent_values"]))
    return f"{lhs} -> {rule['child']}={rule['child_value']} ({rule['probability']:.2f}, n={rule['parent_support']:.0f})"


def attack_table(results):
    return pd.DataFrame(
        [
            {"rows": r["rows"], "target": t, "plain success": p, "Break-Merge success": b}
            for r in results
            for t, (p, b) in r["attack"].items()
        ]
    )


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    rows = [r["rows"] for r in results]
    for key, label in (
        ("t_bn_plain", "BN learn (plain)"),
        ("t_break", "break"),
        ("t_bn_bm", "BN learn (Break-Merge)"),
    ):
        ax1.plot(rows, [r[key] for r in results], marker="o", label=label)
    ax1.set(xscale="log", xlabel="rows", ylabel="seconds", title="Adult replicated")
    ax1.legend()
    breach = results[0]["breach"]
    single = breach[breach["known"] != "-"].reset_index(drop=True)
    x = np.arange(len(single))
    ax2.bar(x - 0.2, single["mean_probability_plain"], 0.4, label="plain")
    ax2.bar(x + 0.2, single["mean_probability_bm"], 0.4, label="Break-Merge")
    ax2.set_xticks(
        x,
        [f"{t}|{k}" for t, k in zip(single["target"], single["known"])],
        rotation=60,
        ha="right",
        fontsize=7,
    )
    ax2.set(ylabel="mean breach probability", title=f"{results[0]['rows']} rows, given one SA")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv):
    quick = "--quick" in argv
    adult = load_adult(os.environ.get("PLPY_ANON_DATA", "/work/shared/data"))
    results = [run_size(adult, n) for n in (SIZES[:1] if quick else SIZES)]
    first = results[0]
    sections = [
        f"# Break-Merge on Adult (k={K}, l={L}, QIs {', '.join(QIS)}; SAs {', '.join(SENSITIVE)})",
        "## Timings (seconds)",
        markdown(timing_table(results)),
        f"## Dependency rules at risk {RISK} ({first['rows']} rows)",
        markdown(rules_table(first)),
        f"Edges, plain: {first['edges_plain']}",
        f"Edges, Break-Merge: {first['edges_bm']}",
        f"## Knowledge-breach probabilities ({first['rows']} rows, threshold {THRESHOLD})",
        markdown(first["breach"]),
        "## Attack: knows QIs + workclass, guesses another SA",
        markdown(attack_table(results)),
    ]
    report = "\n\n".join(sections) + "\n"
    print(report)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "breakmerge.md").write_text(report)
    plot(results, RESULTS / "breakmerge.png")


if __name__ == "__main__":
    main(sys.argv[1:])
