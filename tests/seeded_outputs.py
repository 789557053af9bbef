"""Digests of every seeded computation, printed as JSON: run in fresh interpreters with other
hash seeds, thread counts and CPU feature sets, the digests must agree (tests/unit/
test_seeded_determinism.py). A seed that gives other numbers on another machine is a release
nobody can reproduce, and a documented example that fails there."""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pandas as pd


def digest(*parts) -> str:
    text = "|".join(p.to_csv() if isinstance(p, (pd.DataFrame, pd.Series)) else repr(p)
                    for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fusion_scan() -> str:
    from plpy_anon.core.fusion import fusion_scan
    from plpy_anon.core.synthetic import make_enterprise
    employees, web = make_enterprise(400, web_coverage=0.85, n_strangers=10, random_state=0)
    scan = fusion_scan(employees.sort_values("name").reset_index(drop=True), web,
                       identifier="name", sensitive="salary", k_from=2, k_to=5, repeats=2,
                       random_state=3)
    return digest(scan.table.round(12), scan.chosen_k())


def mdav_groups() -> str:
    from plpy_anon.core.mdav import MDAV
    rng = np.random.default_rng(5)
    # small integer scores: many exact ties in distance, where selection algorithms differ
    X = pd.DataFrame(rng.integers(1, 6, size=(600, 3)), columns=["a", "b", "c"])
    return digest(*[MDAV(k=k).fit(X).labels_.tolist() for k in (2, 3, 7)])


def pattern_walk() -> str:
    from plpy_anon.core.pattern.release import PatternPreservingRelease
    rng = np.random.default_rng(9)
    table = pd.DataFrame({"x": rng.integers(0, 50, 300).astype(float),
                          "y": np.round(rng.normal(10, 3, 300), 2)})
    released = PatternPreservingRelease(segment=40, iterations=150, seed=17,
                                        n_jobs=int(os.environ.get("SEEDED_OUTPUTS_JOBS", "1"))).fit_transform(table)
    return digest(pd.DataFrame(released).round(12))


def bayes_network() -> str:
    from plpy_anon.core.bayesnet import BayesNet
    rng = np.random.default_rng(2)
    n = 3000
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.7, a, rng.integers(0, 3, n))
    c = (a + b + rng.integers(0, 2, n)) % 4
    d = rng.integers(0, 2, n)
    bn = BayesNet().fit(pd.DataFrame({"a": a, "b": b, "c": c, "d": d}))
    return digest(sorted(bn.edges_), sorted(map(str, bn.dependency_rules(0.5))))


COMPUTATIONS = {"fusion_scan": fusion_scan, "mdav_groups": mdav_groups,
                "pattern_walk": pattern_walk, "bayes_network": bayes_network}

if __name__ == "__main__":
    print(json.dumps({name: compute() for name, compute in COMPUTATIONS.items()}))
