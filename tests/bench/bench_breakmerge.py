"""Experiment of issue 4 (paper 003), not a test: Break-Merge, Bayesian-network leak detection and
knowledge-breach probabilities on UCI Adult.

    /opt/plpy_anon/venv/bin/python -m tests.bench.bench_breakmerge [--quick] [--no-db]
    (or make bench / python -m tests.bench breakmerge; --rules: the max_rule_probability
    experiment only)

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

Then, in a throwaway cluster with the extension, for 30,162 and 100,000 rows: seconds of
anon.mondrian_view, anon.break_merge, anon.refresh of the Break-Merge release,
anon.detect_dependencies (plain and Break-Merge) and anon.breach_report, with sample output.

Prints Markdown tables, and writes bench-results/breakmerge.md and bench-results/breakmerge.png.
``--quick`` runs the 30,162-row size only; ``--no-db`` skips the cluster. PLPY_ANON_DATA overrides
../shared/data.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd

from plpy_anon.core.bayesnet import BayesNet
from plpy_anon.core.breach import attack_break_merge, attack_plain, break_merge_breach, plain_breach
from plpy_anon.core.breakmerge import BreakMerge, merge_tables, relabel_in_order
from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.generalize import class_bounds
from plpy_anon.core.mondrian import Mondrian
from tests.bench.common import adult, copy_frame, extension_db, results_dir

QIS = ["age", "sex", "race", "native_country"]
SENSITIVE = ["workclass", "marital_status", "income"]
K, L, RISK, THRESHOLD = 5, 2, 0.9, 0.5
SIZES = [30_162, 100_000, 1_000_000]
DB_SIZES = [30_162, 100_000]


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


# ---------------------------------------------------------------------------- in the extension

SOURCE_TYPES = {
    "age": "int",
    "sex": "text",
    "race": "text",
    "native_country": "text",
    "workclass": "text",
    "marital_status": "text",
    "income": "text",
}


def run_in_database(frame, sizes):
    """Load Adult (replicated) into a throwaway cluster and time the SQL functions."""
    rows, samples = [], {}
    with extension_db() as conn:
        for n_rows in sizes:
            table = f"adult_{n_rows}"
            copy_frame(conn, table, replicate(frame, n_rows)[list(SOURCE_TYPES)], SOURCE_TYPES)
            params = {"t": table, "k": K, "l": L, "q": QIS, "s": SENSITIVE}
            t_plain = _sql_seconds(
                conn,
                "SELECT anon.mondrian_view(%(t)s, k => %(k)s, quasi_identifiers => %(q)s, "
                "sensitive => %(s)s)",
                params,
            )
            t_break = _sql_seconds(
                conn,
                "SELECT anon.break_merge(%(t)s, k => %(k)s, l => %(l)s, quasi_identifiers => %(q)s, "
                "sensitive => %(s)s)",
                params,
            )
            t_refresh = _sql_seconds(
                conn, "SELECT anon.refresh(%(r)s)", {"r": f"release.{table}_bm"}
            )
            rules, seconds = {}, {}
            for kind, release in (("plain", f"{table}_k{K}"), ("break_merge", f"{table}_bm")):
                start = time.perf_counter()
                rules[kind] = conn.execute(
                    "SELECT parents, parent_values, child, child_value, round(probability::numeric, 3), "
                    "round(support::numeric, 1), round(parent_support::numeric, 1) "
                    "FROM anon.detect_dependencies(%s, risk => %s)",
                    (release, RISK),
                ).fetchall()
                seconds[kind] = time.perf_counter() - start
            start = time.perf_counter()
            breach = conn.execute(
                "SELECT release_kind, target, known, round(max_probability::numeric, 3), "
                "round(mean_probability::numeric, 3), n_above "
                "FROM anon.breach_report(%s, threshold => %s)",
                (f"{table}_bm", THRESHOLD),
            ).fetchall()
            t_breach = time.perf_counter() - start
            rows.append(
                {
                    "rows": n_rows,
                    "mondrian_view s": t_plain,
                    "break_merge s": t_break,
                    "refresh s": t_refresh,
                    "detect_dependencies plain s": seconds["plain"],
                    "detect_dependencies Break-Merge s": seconds["break_merge"],
                    "breach_report s": t_breach,
                }
            )
            samples.setdefault("rules", rules)
            samples.setdefault("breach", breach)
            samples.setdefault(
                "release",
                conn.execute(
                    "SELECT release_name, row_count, achieved_k, metrics -> 'n_classes', "
                    "metrics -> 'n_groups', metrics -> 'largest_group' FROM anon.releases "
                    "WHERE release_name = %s",
                    (f"{table}_bm",),
                ).fetchall(),
            )
    return pd.DataFrame(rows), samples


def _sql_seconds(conn, query, params):
    start = time.perf_counter()
    conn.execute(query, params).fetchall()
    return time.perf_counter() - start


def rule_lines(rules, limit=10):
    out = []
    for parents, values, child, value, p, support, parent_support in rules[:limit]:
        lhs = ", ".join(f"{a}={v}" for a, v in zip(parents, values))
        out.append(f"- {lhs} -> {child}={value}: p={p}, support {support} of {parent_support}")
    return "\n".join(out) or "- (none)"


ISSUE_RULES = 61  # QI -> SA rules at 0.9 the issue read off a Break-Merge release of Adult


def readable_rules(conn, release, size, threshold=RISK):
    """Per sensitive column: the rules a reader counts in the release's merge view, antecedents
    of ``size`` released QI values with at least K rows, probability >= threshold (the network-based
    check left 427 / 190 / 995 of them at sizes 1 to 3). Size len(QIS) is the whole QI class."""
    from itertools import combinations
    counts = {}
    for attribute in SENSITIVE:
        n = 0
        for columns in combinations(QIS, size):
            keys = ", ".join(f'"{c}"' for c in columns)
            (found,), = conn.execute(
                f'SELECT count(*) FROM (SELECT sum(weight) / nullif(sum(sum(weight)) '
                f'FILTER (WHERE "{attribute}" IS NOT NULL) OVER w, 0) AS p, '
                f'sum(sum(weight)) OVER w AS support, "{attribute}" AS v '
                f'FROM {release}_merged GROUP BY {keys}, "{attribute}" '
                f"WINDOW w AS (PARTITION BY {keys})) AS x "
                f"WHERE v IS NOT NULL AND p >= %s AND support >= %s", (threshold, K)).fetchall()
            n += found
        counts[attribute] = n
    return counts


def rule_check_in_database(frame, alpha=RISK):
    """Issue: rules an analyst reads off the release (anon.detect_dependencies at risk 0.9, QI ->
    SA only), Break-Merge without and with max_rule_probability => alpha; the paper's k, l, QIs
    and SAs. Utility cost: groups (gids) merged and mean rows per gid (the QIT's generalization,
    hence its NCP, is the same: merging only regroups the STs)."""
    rows = []
    with extension_db() as conn:
        copy_frame(conn, "adult", frame[list(SOURCE_TYPES)], SOURCE_TYPES)
        for name, a in (("adult_bm", None), ("adult_bm_alpha", alpha),
                        ("adult_bm_alpha_low", round(alpha - 0.1, 2))):
            t_break = _sql_seconds(
                conn,
                "SELECT anon.break_merge('adult', k => %s, l => %s, quasi_identifiers => %s, "
                "sensitive => %s, max_rule_probability => %s, release_name => %s)",
                (K, L, QIS, SENSITIVE, a, name))
            (n_rules, top), = conn.execute(
                "SELECT count(*), max(probability) FROM anon.detect_dependencies(%s, risk => %s) "
                "WHERE child = ANY(%s) AND parents && %s::text[]",
                (f"release.{name}", RISK, SENSITIVE, QIS)).fetchall()
            (metrics,), = conn.execute(
                "SELECT metrics FROM anon.releases WHERE release_name = %s", (name,)).fetchall()
            counted = {size: readable_rules(conn, f"release.{name}", size, a or alpha)
                       for size in range(1, len(QIS) + 1)}
            t_refresh = _sql_seconds(conn, "SELECT anon.refresh(%s)", (f"release.{name}",))
            check = metrics.get("rule_check") or {}
            residual = check.get("max_residual_probability")
            rows.append({
                "release": "Break-Merge" if a is None else f"max_rule_probability => {a}",
                f"QI->SA rules >= {RISK} (issue: {ISSUE_RULES})": n_rules,
                "strongest": None if top is None else round(top, 3),
                **{f"rules >= alpha ({alpha} without), {size} QI value{'s' * (size > 1)}"
                   f"{' (the class)' if size == len(QIS) else ''} (target: 0 with alpha)":
                   " / ".join(f"{a} {n}" for a, n in by_attribute.items())
                   for size, by_attribute in counted.items()},
                "class detail kept (1 = each class's own shares, 0 = the table's)": " / ".join(
                    f"{a} {v:.3f}" for a, v in check.get("class_detail_kept", {}).items()) or "-",
                "strongest residual": residual,
                "rounds": check.get("rounds"),
                "groups": metrics["n_groups"],
                "classes": metrics["n_classes"],
                "gids merged for rules": check.get("gids_merged"),
                "mean rows per gid": metrics.get("mean_group_size"),
                "largest gid": metrics["largest_group"],
                "break_merge s": round(t_break, 2),
                "refresh s": round(t_refresh, 2),
            })
    return pd.DataFrame(rows)


def main(argv=None):
    argv = [] if argv is None else argv
    quick = "--quick" in argv
    frame = adult()
    if "--rules" in argv:  # the max_rule_probability experiment only (30,162 rows)
        table = rule_check_in_database(frame)
        print(f"# Break-Merge QI -> SA rules on Adult (k={K}, l={L}, risk {RISK}; target: 0)")
        print(markdown(table))
        return
    results = [run_size(frame, n) for n in (SIZES[:1] if quick else SIZES)]
    first = results[0]
    sections = [
        f"# Break-Merge on Adult (k={K}, l={L}, QIs {', '.join(QIS)}; SAs {', '.join(SENSITIVE)})",
        "## Core timings (seconds; Adult replicated)",
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
    if "--no-db" not in argv:
        db_times, samples = run_in_database(frame, DB_SIZES[:1] if quick else DB_SIZES)
        breach = pd.DataFrame(
            samples["breach"], columns=["release_kind", "target", "known", "max", "mean", "n_above"]
        )
        sections += [
            "## In the extension (seconds, throwaway cluster)",
            markdown(db_times),
            f"Catalog row (name, rows, achieved k, classes, ST groups, largest group): {samples['release']}",
            f"### anon.detect_dependencies on the Mondrian release, risk {RISK}",
            rule_lines(samples["rules"]["plain"]),
            f"### anon.detect_dependencies on the Break-Merge release, risk {RISK}",
            rule_lines(samples["rules"]["break_merge"]),
            "### anon.breach_report",
            markdown(breach.fillna("-")),
            f"## QI -> SA rules on Adult with max_rule_probability (k={K}, l={L}, risk {RISK}; target: 0)",
            markdown(rule_check_in_database(frame)),
        ]
    report = "\n\n".join(sections) + "\n"
    print(report)
    out = results_dir()
    (out / "breakmerge.md").write_text(report)
    plot(results, out / "breakmerge.png")


if __name__ == "__main__":
    main(sys.argv[1:])
