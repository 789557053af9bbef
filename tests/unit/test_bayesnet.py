"""Bayesian network: BIC scores, structure recovery, CPTs by hand, dependency rules, speed."""

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.bayesnet import (
    BayesNet,
    _apply,
    _candidate_moves,
    conditional_probability_table,
    encode_columns,
    family_bic,
)
from plpy_anon.core.errors import InsufficientData, InvalidParameter


def _sample_known_network(n, seed=0):
    """a -> c <- b (a v-structure, so the directions are identifiable), c -> d; e independent."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    b = rng.integers(0, 3, n)
    p_c = np.where((a == 1) & (b == 2), 0.9, np.where(a == 1, 0.6, np.where(b == 0, 0.3, 0.05)))
    c = (rng.random(n) < p_c).astype(int)
    d = np.where(rng.random(n) < 0.85, c, 1 - c)
    e = rng.integers(0, 2, n)
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": d, "e": e})


def test_recovers_known_structure():
    bn = BayesNet().fit(_sample_known_network(5000))
    assert set(bn.edges_) == {("a", "c"), ("b", "c"), ("c", "d")}
    assert bn.parents_["e"] == ()


def test_cpt_by_hand():
    X = pd.DataFrame(
        {
            "sex": ["F", "F", "F", "M", "M", "M", "M", "F"],
            "income": ["lo", "lo", "hi", "hi", "hi", "lo", "hi", "lo"],
        }
    )
    cpt = conditional_probability_table(X, "income", ["sex"])
    # F: lo 3, hi 1; M: hi 3, lo 1
    assert cpt["sex"].tolist() == ["F", "M"]
    assert cpt["hi"].tolist() == [0.25, 0.75]
    assert cpt["lo"].tolist() == [0.75, 0.25]
    assert cpt["support"].tolist() == [4, 4]
    root = conditional_probability_table(X, "sex")
    assert root[["F", "M"]].iloc[0].tolist() == [0.5, 0.5]


def test_two_parent_cpt_decodes_configurations():
    X = pd.DataFrame({"p": [0, 0, 1, 1, 1], "q": ["x", "y", "x", "x", "y"], "c": [1, 1, 0, 1, 0]})
    cpt = conditional_probability_table(X, "c", ["p", "q"]).set_index(["p", "q"])
    assert cpt.loc[(1, "x"), 1] == 0.5
    assert cpt.loc[(1, "x"), "support"] == 2
    assert cpt.loc[(0, "y"), 1] == 1.0
    assert len(cpt) == 4


def _bic_by_rows(X, child, parents):
    """BIC of one family, written from the definition: log-likelihood summed over rows."""
    n = len(X)
    joint = X.groupby([*parents, child]).size() if parents else X.groupby(child).size()
    keys = [*parents, child]
    cell = X.groupby(keys)[child].transform("size")
    margin = X.groupby(list(parents))[child].transform("size") if parents else n
    log_likelihood = np.log(cell / margin).sum()
    q = np.prod([X[p].nunique() for p in parents]) if parents else 1
    assert joint.sum() == n
    return log_likelihood - 0.5 * np.log(n) * (X[child].nunique() - 1) * q


@pytest.mark.parametrize(
    "child,parents", [("c", ()), ("c", ("a",)), ("c", ("a", "b")), ("d", ("b", "e"))]
)
def test_family_bic_matches_definition(child, parents):
    X = _sample_known_network(400, seed=3)
    codes, categories = encode_columns(X)
    cards = np.array([len(categories[c]) for c in X.columns])
    index = {c: i for i, c in enumerate(X.columns)}
    got = family_bic(codes, np.ones(len(X)), cards, index[child], tuple(index[p] for p in parents))
    assert got == pytest.approx(_bic_by_rows(X, child, parents))


def test_weights_equal_duplicated_rows():
    X = _sample_known_network(600, seed=5)
    doubled = BayesNet().fit(pd.concat([X, X], ignore_index=True))
    weighted = BayesNet().fit(X, sample_weight=np.full(len(X), 2.0))
    assert doubled.edges_ == weighted.edges_
    assert doubled.score_ == pytest.approx(weighted.score_)
    pd.testing.assert_frame_equal(doubled.cpt("c"), weighted.cpt("c"))


@st.composite
def discrete_frames(draw):
    n = draw(st.integers(min_value=5, max_value=80))
    n_cols = draw(st.integers(min_value=2, max_value=4))
    return pd.DataFrame(
        {
            f"x{j}": draw(st.lists(st.integers(0, draw(st.integers(1, 3))), min_size=n, max_size=n))
            for j in range(n_cols)
        }
    )


def _is_acyclic(edges, nodes):
    graph = {v: {c for p, c in edges if p == v} for v in nodes}
    seen, stack = set(), set()

    def visit(v):
        if v in stack:
            return False
        if v in seen:
            return True
        stack.add(v)
        ok = all(visit(w) for w in graph[v])
        stack.discard(v)
        seen.add(v)
        return ok

    return all(visit(v) for v in nodes)


@settings(max_examples=30, deadline=None)
@given(discrete_frames(), st.integers(1, 3))
def test_learned_graph_is_a_local_optimum_dag(X, max_parents):
    bn = BayesNet(max_parents=max_parents).fit(X)
    assert _is_acyclic(bn.edges_, bn.columns_)
    assert all(len(p) <= max_parents for p in bn.parents_.values())
    # no single edge addition or removal that keeps a DAG improves the BIC (brute force)
    score = lambda parents: sum(_bic_by_rows(X, c, tuple(sorted(parents[c]))) for c in X.columns)
    current = {c: set(p) for c, p in bn.parents_.items()}
    assert bn.score_ == pytest.approx(score(current))
    for u, v in itertools.permutations(X.columns, 2):
        changed = {c: set(p) for c, p in current.items()}
        changed[v] ^= {u}
        edges = [(p, c) for c, ps in changed.items() for p in ps]
        if len(changed[v]) <= max_parents and _is_acyclic(edges, X.columns):
            assert score(changed) <= score(current) + 1e-6


def test_dependency_rules_agree_with_the_data():
    X = _sample_known_network(3000, seed=1)
    bn = BayesNet().fit(X)
    rules = bn.dependency_rules(risk=0.8, min_support=20)
    assert len(rules) > 0
    assert (rules["probability"] >= 0.8).all() and (rules["parent_support"] >= 20).all()
    for rule in rules.itertuples():
        match = np.logical_and.reduce([X[p] == v for p, v in zip(rule.parents, rule.parent_values)])
        assert rule.parent_support == match.sum()
        assert rule.support == pytest.approx((match & (X[rule.child] == rule.child_value)).sum())
        assert rule.probability == pytest.approx(rule.support / rule.parent_support)
    # d copies c with P = 0.85 for both values of c
    assert set(rules.loc[rules["child"] == "d", "parent_values"]) == {(0,), (1,)}


def test_rules_only_from_nodes_with_parents():
    X = _sample_known_network(2000, seed=2)
    bn = BayesNet().fit(X)
    rules = bn.dependency_rules(risk=0.01)
    assert set(rules["child"]) == {c for c, p in bn.parents_.items() if p}


def test_a_fit_of_100k_rows_links_a_many_valued_column_to_the_one_it_determines():
    """(Its time at 100k and 1M rows is a benchmark's: tests/bench/bench_breakmerge.py.)"""
    rng = np.random.default_rng(0)
    X = _sample_known_network(100_000)
    X["f"] = rng.integers(0, 40, len(X))  # a country-like column
    X["g"] = (X["f"] + rng.integers(0, 3, len(X))) % 7
    bn = BayesNet().fit(X)
    assert {("f", "g"), ("g", "f")} & set(bn.edges_), bn.edges_
    assert bn.parents_["e"] == () and all("e" not in p for p in bn.parents_.values())


def test_bad_input():
    with pytest.raises(InvalidParameter, match="at least 2 columns"):
        BayesNet().fit(pd.DataFrame({"a": [1, 2]}))
    with pytest.raises(InsufficientData, match="empty"):
        BayesNet().fit(pd.DataFrame({"a": [], "b": []}))
    with pytest.raises(InvalidParameter, match="max_parents"):
        BayesNet(max_parents=-1).fit(pd.DataFrame({"a": [1], "b": [2]}))
    with pytest.raises(InvalidParameter, match="sample_weight"):
        BayesNet().fit(pd.DataFrame({"a": [1], "b": [2]}), sample_weight=[-1.0])
    with pytest.raises(InvalidParameter, match="not fitted"):
        BayesNet().dependency_rules(0.9)
    bn = BayesNet().fit(pd.DataFrame({"a": [1, 2], "b": [2, 3]}))
    with pytest.raises(InvalidParameter, match="risk"):
        bn.dependency_rules(1.5)


def test_tiers_orient_edges_without_losing_score():
    X = _sample_known_network(3000, seed=4)[["a", "c", "d"]]
    free = BayesNet().fit(X)
    # a -> c -> d is Markov-equivalent to d -> c -> a: same BIC, orientation chosen by the tiers
    tiered = BayesNet(tiers=[["d"], ["c"], ["a"]]).fit(X)
    assert set(tiered.edges_) == {("d", "c"), ("c", "a")}
    assert tiered.score_ == pytest.approx(free.score_)
    with pytest.raises(InvalidParameter, match="not in the data"):
        BayesNet(tiers=[["zzz"]]).fit(X)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(3, 6).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.booleans(), min_size=n * n, max_size=n * n),
            st.permutations(range(n)),
        )
    )
)
def test_every_candidate_move_keeps_a_dag(case):
    n, bits, perm = case
    # a random DAG: upper-triangular edges under a random node order
    upper = np.triu(np.array(bits, dtype=bool).reshape(n, n), k=1)
    adjacency = upper[np.ix_(perm, perm)]
    names = list(range(n))
    legal = set()
    for move in _candidate_moves(adjacency, n, np.zeros((n, n), dtype=bool)):
        trial = adjacency.copy()
        _apply(move, trial)
        edges = [(u, v) for u, v in zip(*np.nonzero(trial))]
        assert _is_acyclic(edges, names), move
        legal.add((move.kind, move.parent, move.child))
    # and no acyclic single-edge addition is missed
    for u, v in itertools.permutations(names, 2):
        if not adjacency[u, v] and not adjacency[v, u]:
            edges = [(a, b) for a, b in zip(*np.nonzero(adjacency))] + [(u, v)]
            assert (("add", u, v) in legal) == _is_acyclic(edges, names)
        if adjacency[u, v]:
            edges = [(a, b) for a, b in zip(*np.nonzero(adjacency)) if (a, b) != (u, v)] + [(v, u)]
            assert (("reverse", u, v) in legal) == _is_acyclic(edges, names)


def test_rules_when_a_value_is_named_like_a_column():
    # child "a" has a value "b", and "b" is also the parent column: no mix-up in the rules
    X = pd.DataFrame({"b": ["u"] * 40 + ["v"] * 40, "a": ["b"] * 38 + ["c"] * 2 + ["c"] * 40})
    bn = BayesNet(tiers=[["b"], ["a"]]).fit(X)
    rules = bn.dependency_rules(0.9).set_index("parent_values")
    assert rules.loc[[("u",)], "child_value"].item() == "b"
    assert rules.loc[[("u",)], "probability"].item() == pytest.approx(38 / 40)
    assert rules.loc[[("v",)], "support"].item() == 40
