"""Pattern-preserving release (paper 002): the paper's experiments, re-run on our implementation.

(a) locality extraction time vs segment size 100..900 (the paper: quadratic);
(b) random-walk time vs number of constraints, 4000 iterations (the paper: linear);
(c) k-means clustering error (k = 3, 5, 7) of our release vs additive uniform perturbation tuned
    to the same per-column distortion Dst, on Adult (age, fnlwgt, education_num) and on a
    10,000-row synthetic uniform table;
(d) relative error of 2,000 random aggregate range queries (AVG of one attribute under range
    predicates on the two others) on Adult: our release vs Mondrian (k = l in 4..12, occupation
    as the sensitive attribute, uniform-spread estimates inside each class);
(f) how far the walk moves: mean |released - original| over the mean gap between neighbouring
    values, vs sample and iterations (1,000 fnlwgt-like values, no rounding effect);
(e) with PATTERN_BENCH_MILLION=1: one 1,000,000-row column, segment 100, rho 0.3, 4000 iterations;
(g) the targets of the "values really move" issue, in PostgreSQL: ``anon.pattern_view`` on Adult
    (age, fnlwgt, education_num) at the paper's parameters (segment 100, rho 0.3, 4000
    iterations, our default delta 16), timed beside a Mondrian release of the same columns;
    share of rows changed per column (target >= 90 %) and linkage re-identification on the
    released (age, education_num, fnlwgt +- 1) (target < 5 %; 89.9 % before the fix).

PATTERN_BENCH_PARTS=g,c,d (for example) runs only those parts; default: all.

Prints Markdown tables and writes bench-results/pattern.md plus PNG plots.  (a) and (b) are
single-threaded and timed in CPU seconds of this process (the machine is shared); releases and
(e) in wall-clock seconds.  The shapes, not the constants, are the point.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans

from plpy_anon.core.encoding import encode_numeric
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.pattern import (
    PatternPreservingRelease,
    constraint_matrix,
    distortion_per_column,
    extract_localities,
    random_walk,
    rank_correlation,
    sample_localities,
    unchanged_fraction,
)
from tests.bench.common import adult, copy_frame, extension_db, markdown_table, results_dir

ADULT_QIS = ["age", "fnlwgt", "education_num"]
SEED = 2026


def adult_table(rows=30_000):
    """The paper's Adult extract: the first 30K complete tuples, 3 QIs + occupation."""
    frame = adult().head(rows)
    return frame[ADULT_QIS].astype(float), frame["occupation"].to_numpy()


def synthetic_table(rows=10_000):
    rng = np.random.default_rng(SEED)
    return rng.uniform(0, 1, size=(rows, 3)).round(6)


# ---------------------------------------------------------------- (a) extraction time

def extraction_times(values, sizes, repeats=3):
    """Average seconds to extract one segment of each size (sorted slices of ``values``)."""
    ordered = np.sort(values)
    rows = []
    for size in sizes:
        starts = np.linspace(0, ordered.size - size, repeats).astype(int)
        t0 = time.process_time()
        counts = [len(extract_localities(ordered[s:s + size])) for s in starts]
        rows.append((size, (time.process_time() - t0) / repeats, int(np.mean(counts))))
    return rows


# ---------------------------------------------------------------- (b) walk time

def walk_times(values, fractions, size=100, iterations=4000):
    rng = np.random.default_rng(SEED)
    segment = np.sort(values[:size]) + np.arange(size) * 1e-9 * max(1.0, np.ptp(values))
    everything = extract_localities(segment)
    rows = []
    for fraction in fractions:
        sampled = sample_localities(everything, fraction, rng)
        A = constraint_matrix(sampled, size)
        low, high = np.full(size, values.min()), np.full(size, values.max())
        t0 = time.process_time()
        random_walk(A, np.zeros(A.shape[0]), low, high, segment, iterations, rng)
        rows.append((fraction, A.shape[0], time.process_time() - t0))
    return rows


# ---------------------------------------------------------------- (c) clustering

def clustering_error(original, released, k):
    """Share of rows not in the cluster matching theirs, clusters matched by max overlap."""
    mean, std = original.mean(axis=0), original.std(axis=0)
    fit = lambda data: KMeans(n_clusters=k, n_init=4, random_state=SEED).fit_predict(
        (data - mean) / std)
    before, after = fit(original), fit(released)
    overlap = np.zeros((k, k))
    np.add.at(overlap, (before, after), 1)
    rows, cols = linear_sum_assignment(-overlap)
    return 1.0 - overlap[rows, cols].sum() / original.shape[0]


def perturb_to_distortion(original, target_dst, rng):
    """Additive uniform noise U(-a, a) per column with a chosen so the column's Dst equals the
    target exactly (Dst is linear in a for fixed draws)."""
    draws = rng.uniform(-1, 1, size=original.shape)
    nonzero = original != 0
    scale = np.array([np.mean(np.abs(draws[nonzero[:, c], c]) / np.abs(original[nonzero[:, c], c]))
                      for c in range(original.shape[1])])
    return original + draws * (np.asarray(target_dst) / scale)


_RELEASES = {}


def release(table, sample, segment=100, iterations=4000, delta=16.0):
    """Our release of ``table`` (memoized: (c) and (d) share the Adult ones)."""
    key = (id(table), sample, segment, iterations, delta)
    if key not in _RELEASES:
        t0 = time.perf_counter()
        model = PatternPreservingRelease(segment=segment, sample=sample, iterations=iterations,
                                         seed=SEED, n_jobs=2, delta=delta).fit(table)
        _RELEASES[key] = (model.released_, time.perf_counter() - t0)
    return _RELEASES[key]


def clustering_rows(name, table, fractions):
    rng = np.random.default_rng(SEED)
    rows = []
    for fraction in fractions:
        ours, seconds = release(table, fraction)
        dst = distortion_per_column(table, ours)
        noisy = perturb_to_distortion(table, dst, rng)
        unchanged = float(np.mean(unchanged_fraction(table, ours)))
        for k in (3, 5, 7):
            rows.append([name, fraction, round(seconds, 1), float(np.mean(dst)), unchanged,
                         float(np.mean(rank_correlation(table, ours))), k,
                         clustering_error(table, ours, k), clustering_error(table, noisy, k)])
    return rows


# ---------------------------------------------------------------- (d) range queries

def random_queries(table, n_queries, rng):
    """(target column, [(column, low, high)] x 2) with at least one matching original row."""
    queries = []
    while len(queries) < n_queries:
        target = int(rng.integers(3))
        predicates = []
        for c in (c for c in range(3) if c != target):
            low, high = np.sort(rng.choice(table[:, c], size=2, replace=False))
            predicates.append((c, low, high))
        if _matching(table, predicates).any():
            queries.append((target, predicates))
    return queries


def _matching(table, predicates):
    mask = np.ones(table.shape[0], dtype=bool)
    for c, low, high in predicates:
        mask &= (table[:, c] >= low) & (table[:, c] <= high)
    return mask


def exact_answers(table, queries):
    return np.array([table[_matching(table, p), t].mean() if _matching(table, p).any()
                     else np.nan for t, p in queries])


def mondrian_classes(table, occupation, l):
    encoded = [encode_numeric(name, table[:, c]) for c, name in enumerate(ADULT_QIS)]
    sensitive = np.unique(occupation, return_inverse=True)[1][:, None]
    labels = Mondrian(k=l, l=l).fit(encoded, sensitive).labels_
    n = labels.max() + 1
    low = np.full((n, 3), np.inf)
    high = np.full((n, 3), -np.inf)
    for c in range(3):
        np.minimum.at(low[:, c], labels, table[:, c])
        np.maximum.at(high[:, c], labels, table[:, c])
    sizes = np.bincount(labels, minlength=n)
    means = np.column_stack([np.bincount(labels, table[:, c], n) / sizes for c in range(3)])
    return labels, low, high, sizes, means


def mondrian_answers(classes, queries):
    """Uniform-spread estimate: each class contributes size x the product of the overlap shares
    of its box with the predicate ranges, and its box midpoint for the averaged attribute."""
    _, low, high, sizes, _ = classes
    answers = []
    for target, predicates in queries:
        weight = sizes.astype(float)
        for c, qlow, qhigh in predicates:
            width = high[:, c] - low[:, c]
            overlap = np.clip(np.minimum(high[:, c], qhigh) - np.maximum(low[:, c], qlow), 0, None)
            inside = (low[:, c] <= qhigh) & (high[:, c] >= qlow)
            share = np.where(width > 0, overlap / np.where(width > 0, width, 1), inside * 1.0)
            weight = weight * share
        midpoint = (low[:, target] + high[:, target]) / 2
        total = weight.sum()
        answers.append(np.nan if total == 0 else float((weight * midpoint).sum() / total))
    return np.array(answers)


def relative_error(truth, estimate):
    error = np.abs(truth - estimate) / np.abs(truth)
    return float(np.mean(np.where(np.isnan(estimate), 1.0, error)))   # no estimate: 100% error


def query_rows(table, occupation, n_queries=2000,
               settings=((0.02, 16.0), (0.3, 16.0), (0.3, 4.0), (0.3, 1.0))):
    rng = np.random.default_rng(SEED)
    queries = random_queries(table, n_queries, rng)
    truth = exact_answers(table, queries)
    rows = []
    for l in (4, 6, 8, 10, 12):
        classes = mondrian_classes(table, occupation, l)
        dst = float(np.mean(distortion_per_column(table, classes[4][classes[0]])))
        rows.append([f"Mondrian k=l={l}", dst, "", relative_error(truth, mondrian_answers(classes, queries))])
    for fraction, delta in settings:
        ours, _ = release(table, fraction, delta=delta)
        dst = float(np.mean(distortion_per_column(table, ours)))
        worst = float(np.max(unchanged_fraction(table, ours)))
        rows.append([f"pattern rho={fraction} delta={delta:g}", dst, worst,
                     relative_error(truth, exact_answers(ours, queries))])
    return rows


# ---------------------------------------------------------------- (f) how far values move

def movement_rows(fractions=(0.01, 0.1, 0.3, 1.0), iterations=(4000, 40000)):
    values = np.random.default_rng(SEED).normal(190_000, 100_000, size=(1000, 1)).round()
    gap = np.diff(np.sort(values[:, 0])).mean()
    rows = []
    for fraction in fractions:
        for steps in iterations:
            released = PatternPreservingRelease(segment=100, sample=fraction, iterations=steps,
                                                seed=SEED).fit(values).released_
            rows.append([fraction, steps, float(np.abs(released - values).mean() / gap),
                         float(distortion_per_column(values, released)[0])])
    return rows


# ---------------------------------------------------------------- (g) issue targets, in SQL

def linkage_share(original, released):
    """Share of rows an attacker who knows a row's original (age, fnlwgt, education_num)
    re-identifies: exactly one released row has the same age and education_num and a fnlwgt
    within +-1 of the known one, and it is that row.  Rows are aligned (row i = same person)."""
    def key(table, shift=0):
        return ((table[:, 0].astype(np.int64) * 32 + table[:, 2].astype(np.int64)) << 22) \
            + table[:, 1].astype(np.int64) + shift
    released_key = key(released)
    order = np.argsort(released_key, kind="stable")
    ordered = released_key[order]
    first = np.searchsorted(ordered, key(original, -1), side="left")
    last = np.searchsorted(ordered, key(original, +1), side="right")
    unique = (last - first) == 1
    own = np.zeros(original.shape[0], dtype=bool)
    own[unique] = order[first[unique]] == np.flatnonzero(unique)
    return float(own.mean())


def rank_linkage_share(original, released):
    """Share of rows an attacker who knows EVERY row's original values re-identifies by rank
    rather than by value (a review's attack: the walk keeps each row's place in each column's
    order): each column turned into ranks (ties averaged, scaled to [0, 1]) on both sides, and a
    row counts when its nearest released row in rank space (L1) is unique and is that row. Rows
    are aligned (row i = same person)."""
    from sklearn.neighbors import NearestNeighbors

    def ranks(table):
        return np.column_stack([pd.Series(table[:, j]).rank().to_numpy() / table.shape[0]
                                for j in range(table.shape[1])])
    known, seen = ranks(original), ranks(released)
    distance, index = NearestNeighbors(n_neighbors=2, p=1).fit(seen).kneighbors(known)
    unique = distance[:, 0] < distance[:, 1]
    return float((unique & (index[:, 0] == np.arange(original.shape[0]))).mean())


def issue_rows():
    """pattern_view vs mondrian_view on Adult in a throwaway cluster; changed share and linkage
    counted on the released rows joined to the source by id."""
    frame = adult().head(30_000)[ADULT_QIS].reset_index(drop=True)
    frame.insert(0, "id", np.arange(len(frame)))
    with extension_db() as conn:
        copy_frame(conn, "adult", frame, {"id": "int", "age": "int", "fnlwgt": "int",
                                          "education_num": "int"})
        conn.execute("ALTER TABLE adult ADD PRIMARY KEY (id)")
        t0 = time.perf_counter()
        conn.execute("SELECT anon.pattern_view('adult', ARRAY['age', 'fnlwgt', 'education_num'], "
                     "segment => 100, sample => 0.3, iterations => 4000, seed => %s, "
                     "sensitive => ARRAY['id'], release_name => 'adult_pp')", (SEED,))
        pattern_s = time.perf_counter() - t0
        load = round(os.getloadavg()[0], 1)
        t0 = time.perf_counter()
        conn.execute("SELECT anon.mondrian_view('adult', k => 10, quasi_identifiers => "
                     "ARRAY['age', 'fnlwgt', 'education_num'], release_name => 'adult_mondrian')")
        mondrian_s = time.perf_counter() - t0
        pairs = np.array(conn.execute(
            "SELECT a.age, a.fnlwgt, a.education_num, r.age, r.fnlwgt, r.education_num "
            "FROM adult a JOIN release.adult_pp r USING (id) ORDER BY id").fetchall(), dtype=float)
        changed = conn.execute(
            "SELECT avg((r.age <> a.age)::int), avg((r.fnlwgt <> a.fnlwgt)::int), "
            "avg((r.education_num <> a.education_num)::int) "
            "FROM adult a JOIN release.adult_pp r USING (id)").fetchone()
        dst = conn.execute("SELECT column_name, distortion FROM anon.distortion('adult', "
                           "'release.adult_pp')").fetchall()
        seconds = conn.execute("SELECT metrics->'seconds', refresh_seconds FROM anon.releases "
                               "WHERE release_name = 'adult_pp'").fetchone()
    original, released = pairs[:, :3], pairs[:, 3:]
    before = {"age": "0 % (before the fix)", "fnlwgt": "62 % (before the fix)",
              "education_num": "0 % (before the fix)"}
    rows = [[f"rows changed, {c}", float(changed[i]), before[c], ">= 90 %"]
            for i, c in enumerate(ADULT_QIS)]
    rows.append(["linkage re-identification (age, edu, fnlwgt +- 1)",
                 linkage_share(original, released), "89.9 % (before the fix)", "< 5 %"])
    rows.append(["linkage on the source itself (for scale)", linkage_share(original, original),
                 "", ""])
    rows.append(["rank linkage (every row's original values known; nearest row in rank space)",
                 rank_linkage_share(original, released), "", "no target: see pattern.md"])
    rows.append(["rank linkage on the source itself (for scale)",
                 rank_linkage_share(original, original), "", ""])
    before_s = "6.1 s batches walked one by one (load 5-7), 19.4 s (0.1.0 walk), ~27 s before"
    rows.append(["pattern_view seconds", pattern_s, before_s, "<= 5 s"])
    rows.append(["load average during the release (2 cores, shared)", load, "", ""])
    parts, refresh = seconds
    rows += [["  of which reading the columns (s)", parts["read"], "", ""],
             ["  of which the walk, core (s)", parts["walk"], "", ""],
             ["  the walk's CPU seconds (backend, all threads)", parts.get("walk_cpu"),
              "7.2 s batches walked one by one", ""],
             ["  of which the Python run in all (s)", parts["python_total"], "", ""],
             ["  the refresh in all, catalog (s)", refresh, "", ""]]
    rows.append(["mondrian_view seconds (k = 10, same columns)", mondrian_s, "", ""])
    rows += [[f"Dst {name or 'overall'}", value, "", ""] for name, value in dst]
    return rows


# ---------------------------------------------------------------- output

def plot(path, xs, series, xlabel, ylabel, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(5, 3.5))
    for label, ys in series.items():
        axes.plot(xs[label] if isinstance(xs, dict) else xs, ys, marker="o", label=label)
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main():
    out = results_dir()
    report = ["# Pattern-preserving release (paper 002)\n"]
    parts = set((os.environ.get("PATTERN_BENCH_PARTS") or "a,b,c,d,e,f,g").split(","))
    if "g" in parts:
        table = markdown_table(["figure", "ours", "before / paper", "target"], issue_rows())
        report += ["## (g) Values really move: Adult at the paper's parameters, in SQL\n",
                   table, ""]
        print(table, flush=True)
    adult_frame, occupation = adult_table()
    adult_values = adult_frame.to_numpy()
    synthetic = synthetic_table()

    if "a" in parts:
        report += part_a(synthetic, adult_values, out)
    if "b" in parts:
        report += part_b(synthetic, adult_values, out)
    if "c" in parts:
        report += part_c(synthetic, adult_values, out)
    if "d" in parts:
        report += part_d(adult_values, occupation, out)
    if "f" in parts:
        rows = movement_rows()
        table = markdown_table(["rho", "iterations", "mean move / mean gap", "Dst"], rows)
        report += ["## (f) How far the walk moves (1,000 normal values, segment 100)\n", table,
                   ""]
        print(table, flush=True)
    if "e" in parts and os.environ.get("PATTERN_BENCH_MILLION"):
        report += part_e()
    (out / "pattern.md").write_text("\n".join(report) + "\n")


def part_a(synthetic, adult_values, out):
    report = []
    sizes = list(range(100, 1000, 100))
    extraction = {"Adult fnlwgt": extraction_times(adult_values[:, 1], sizes),
                  "Adult age": extraction_times(adult_values[:, 0], sizes),
                  "synthetic": extraction_times(synthetic[:, 0], sizes)}
    rows = [[size] + [v[i][1] * 1000 for v in extraction.values()]
            + [extraction["synthetic"][i][2], extraction["synthetic"][i][1] / size ** 2 * 1e9]
            for i, size in enumerate(sizes)]
    table = markdown_table(["segment", *[f"{k} ms" for k in extraction], "localities (synth.)",
                            "synth. ns / s^2"], rows)
    report += ["## (a) Locality extraction time per segment\n", table, ""]
    plot(out / "pattern_extraction.png", sizes,
         {k: [r[1] * 1000 for r in v] for k, v in extraction.items()},
         "segment size", "ms per segment", "(a) extraction time")
    print(table, flush=True)
    return report


def part_b(synthetic, adult_values, out):
    report = []
    fractions = [0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0]
    walks = {"Adult fnlwgt": walk_times(adult_values[:, 1], fractions),
             "synthetic": walk_times(synthetic[:, 0], fractions)}
    rows = [[f, walks["Adult fnlwgt"][i][1], walks["Adult fnlwgt"][i][2],
             walks["synthetic"][i][1], walks["synthetic"][i][2],
             walks["synthetic"][i][2] / walks["synthetic"][i][1] * 1e6]
            for i, f in enumerate(fractions)]
    table = markdown_table(["rho", "constraints (Adult)", "s (Adult)", "constraints (synth.)",
                            "s (synth.)", "us / constraint (synth.)"], rows)
    report += ["## (b) Random walk, segment 100, 4000 iterations\n", table, ""]
    plot(out / "pattern_walk.png", {k: [r[1] for r in v] for k, v in walks.items()},
         {k: [r[2] for r in v] for k, v in walks.items()},
         "constraints (sampled localities)", "seconds", "(b) walk time")
    print(table, flush=True)
    return report


def part_c(synthetic, adult_values, out):
    report = []
    rows = (clustering_rows("synthetic", synthetic, [0.02, 0.3])
            + clustering_rows("Adult", adult_values, [0.02, 0.3]))
    table = markdown_table(["data", "rho", "release s", "Dst", "unchanged", "Spearman", "k",
                            "k-means error (ours)", "k-means error (perturbation, same Dst)"],
                           rows)
    report += ["## (c) k-means clustering error at equal distortion\n", table, ""]
    for data in ("synthetic", "Adult"):
        picked = [r for r in rows if r[0] == data and r[1] == 0.3]
        plot(out / f"pattern_kmeans_{data.lower()}.png", [r[6] for r in picked],
             {"pattern": [r[7] for r in picked], "perturbation": [r[8] for r in picked]},
             "k", "clustering error", f"(c) {data}, rho 0.3")
    print(table, flush=True)
    return report


def part_d(adult_values, occupation, out):
    report = []
    rows = query_rows(adult_values, occupation)
    table = markdown_table(["release", "Dst", "unchanged (worst column)",
                            "mean relative error, 2000 AVG range queries"], rows)
    report += ["## (d) Aggregate range queries on Adult\n", table, ""]
    methods = {"Mondrian": [r for r in rows if r[0].startswith("Mondrian")],
               "pattern": [r for r in rows if r[0].startswith("pattern")]}
    plot(out / "pattern_queries.png", {m: [r[1] for r in v] for m, v in methods.items()},
         {m: [r[3] for r in v] for m, v in methods.items()}, "Dst", "mean relative error",
         "(d) range queries, Adult")
    print(table, flush=True)
    return report


def part_e():
    column = np.random.default_rng(SEED).uniform(0, 1, size=(1_000_000, 1)).round(6)
    rows = []
    for jobs in (1, 2):
        t0 = time.perf_counter()
        PatternPreservingRelease(segment=100, sample=0.3, iterations=4000, seed=SEED,
                                 n_jobs=jobs).fit(column)
        rows.append([jobs, time.perf_counter() - t0])
    table = markdown_table(["threads", "seconds"], rows)
    print(table, flush=True)
    return ["## (e) 1,000,000-row column, segment 100, rho 0.3, 4000 iterations\n", table]


if __name__ == "__main__":
    main()
