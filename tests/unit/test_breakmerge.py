"""Break-Merge: QIT group map, sensitive tables, l-diversity by merging, invariants, bad input."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.breakmerge import (
    BreakMerge,
    class_detail_kept,
    merge_for_diversity,
    merge_tables,
    relabel_in_order,
    released_rules,
    validate_attribute_roles,
)
from plpy_anon.core.errors import InsufficientData, InvalidParameter, UnsupportedType


def _frame(**columns):
    return pd.DataFrame(columns)


def test_sensitive_tables_by_hand():
    labels = np.array([7, 7, 7, 3, 3, 3])
    sensitive = _frame(
        income=["lo", "lo", "hi", "hi", "hi", "hi"], job=["a", "b", "a", "c", "c", "a"]
    )
    bm = BreakMerge().fit(labels, sensitive)
    # labels are numbered in sorted order: label 3 -> gid 0, label 7 -> gid 1
    assert bm.gid_.tolist() == [1, 1, 1, 0, 0, 0]
    assert bm.group_sizes_.tolist() == [3, 3]
    income = bm.sensitive_tables_["income"]
    assert sorted(map(tuple, income.to_numpy().tolist())) == [
        (0, "hi", 3),
        (1, "hi", 1),
        (1, "lo", 2),
    ]
    job = bm.sensitive_tables_["job"]
    assert sorted(map(tuple, job.to_numpy().tolist())) == [
        (0, "a", 1),
        (0, "c", 2),
        (1, "a", 2),
        (1, "b", 1),
    ]
    assert bm.n_merged_ == 0


def test_merge_pairs_complementary_violators():
    # groups 0 and 3 are 2-diverse; 1 holds only "x", 2 only "y": pooled together they are diverse
    present = np.array([[1, 1], [1, 0], [0, 1], [1, 1]], dtype=bool)
    assert merge_for_diversity([present], 2).tolist() == [0, 1, 1, 2]


def test_merge_stuck_run_is_spread_over_hosts():
    # four groups that only hold "x" cannot repair each other: each pair goes to a diverse host,
    # and the two pairs go to two different hosts rather than piling onto the nearest one
    present = np.array([[1, 1], [1, 0], [1, 0], [1, 0], [1, 0], [1, 1]], dtype=bool)
    new_gid = merge_for_diversity([present], 2)
    assert new_gid.tolist() == [0, 0, 0, 1, 1, 1]


def test_merge_checks_every_attribute():
    # group 1 is diverse in attribute A but not in B: it must still be merged
    a = np.array([[1, 1], [1, 1], [1, 1]], dtype=bool)
    b = np.array([[1, 1], [1, 0], [1, 1]], dtype=bool)
    new_gid = merge_for_diversity([a, b], 2)
    assert new_gid[1] in (new_gid[0], new_gid[2])
    assert np.unique(new_gid).size == 2


def test_no_merge_when_already_diverse():
    labels = np.repeat([0, 1, 2], 4)
    sensitive = _frame(s=list("abab" * 3))
    bm = BreakMerge(l=2, k=4).fit(labels, sensitive)
    assert bm.group_map_["gid"].tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# Invariants on random partitions, checked independently with pandas


@st.composite
def partitions(draw):
    n = draw(st.integers(min_value=1, max_value=60))
    labels = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    frame = pd.DataFrame(
        {
            "s1": draw(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=n, max_size=n)),
            "s2": draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)),
        }
    )
    l = draw(st.integers(1, 4))
    return np.array(labels), frame, l


@settings(max_examples=80, deadline=None)
@given(partitions())
def test_invariants(partition):
    labels, sensitive, l = partition
    # a NULL is no value an attacker is unsure between: l counts the values that are not NULL
    feasible = l <= 1 or min(sensitive[c].nunique() for c in sensitive) >= l   # l = 1: none asked
    if not feasible:
        with pytest.raises(InsufficientData, match="l=.*impossible"):
            BreakMerge(l=l).fit(labels, sensitive)
        return
    bm = BreakMerge(l=l).fit(labels, sensitive)
    gid = pd.Series(bm.gid_)
    # a QI group is never split: all rows of one label share one gid
    assert (pd.Series(bm.gid_).groupby(labels).nunique() == 1).all()
    # gids are 0..G-1 and group sizes count the rows of each gid
    assert sorted(gid.unique()) == list(range(bm.group_sizes_.size))
    assert bm.group_sizes_.tolist() == gid.value_counts().sort_index().tolist()
    assert bm.group_sizes_.sum() == len(labels)
    for column in sensitive:
        table = bm.sensitive_tables_[column]
        # per gid, the ST counts sum to the QIT group size
        per_gid = (
            table.groupby("gid")["count"].sum().reindex(range(bm.group_sizes_.size), fill_value=0)
        )
        assert per_gid.tolist() == bm.group_sizes_.tolist()
        # the ST equals the histogram recomputed from the rows
        # (NULL is a value of its own; spelled "<NULL>" here so that it compares equal)
        expected = (
            pd.DataFrame(
                {"gid": bm.gid_, "value": sensitive[column].astype(object).fillna("<NULL>")}
            )
            .groupby(["gid", "value"])
            .size()
        )
        got = table.assign(value=table["value"].astype(object).fillna("<NULL>"))
        assert dict(got.set_index(["gid", "value"])["count"]) == dict(expected)
        # every group of every ST is l-diverse in values that are not NULL
        if l > 1:
            assert (table.groupby("gid")["value"].nunique() >= l).all()
    # merging only grows groups: no gid is smaller than the smallest input group
    assert bm.group_sizes_.min() >= np.bincount(np.unique(labels, return_inverse=True)[1]).min()
    assert bm.n_merged_ == np.unique(labels).size - bm.group_sizes_.size


# ---------------------------------------------------------------------------------------------
# Bad input


def test_l_larger_than_distinct_values():
    with pytest.raises(InsufficientData, match="income") as error:
        BreakMerge(l=3).fit(np.zeros(4), _frame(income=["lo", "hi", "lo", "hi"], job=list("abcd")))
    assert "l <= 2" in error.value.hint


def test_too_many_categories_refused():
    sensitive = _frame(salary=np.arange(5000))
    with pytest.raises(UnsupportedType, match="5000 distinct values") as error:
        BreakMerge().fit(np.arange(5000) // 10, sensitive)
    assert "bucket" in error.value.hint


def test_partition_not_k_anonymous():
    with pytest.raises(InvalidParameter, match="not 3-anonymous"):
        BreakMerge(k=3).fit(np.array([0, 0, 0, 1, 1]), _frame(s=list("abcab")))


def test_labels_must_match_rows():
    with pytest.raises(InvalidParameter, match="one group label per row"):
        BreakMerge().fit(np.zeros(3), _frame(s=list("ab")))


@pytest.mark.parametrize("params", [{"l": 0}, {"k": -1}, {"l": 2.5}, {"max_categories": 1}])
def test_bad_parameters(params):
    with pytest.raises(InvalidParameter):
        BreakMerge(**params).fit(np.zeros(2), _frame(s=list("ab")))


def test_attribute_roles():
    validate_attribute_roles(["age", "sex"], ["income"])
    with pytest.raises(InvalidParameter, match=r"\['sex'\] are both"):
        validate_attribute_roles(["age", "sex"], ["sex", "income"])
    with pytest.raises(InvalidParameter, match="no sensitive"):
        validate_attribute_roles(["age"], [])
    with pytest.raises(InvalidParameter, match="listed twice"):
        validate_attribute_roles(["age"], ["income", "income"])


def test_merge_tables_weights_by_hand():
    qit = pd.DataFrame({"age": ["[30-40]"] * 3 + ["[40-50]"], "gid": [0, 0, 0, 0]})
    sts = {
        "income": pd.DataFrame({"gid": [0, 0], "value": ["lo", "hi"], "count": [3, 1]}),
        "job": pd.DataFrame({"gid": [0, 0], "value": ["a", "b"], "count": [2, 2]}),
    }
    merged = merge_tables(qit, sts).set_index(["age", "income", "job"])["weight"]
    # [30-40] stands for 3 of the 4 rows: 3 * 3/4 * 2/4 = 9/8 for (lo, a)
    assert merged[("[30-40]", "lo", "a")] == pytest.approx(9 / 8)
    assert merged[("[40-50]", "hi", "b")] == pytest.approx(1 * 1 / 4 * 2 / 4)
    assert merged.sum() == pytest.approx(4)
    assert len(merged) == 2 * 2 * 2


def test_relabel_in_order():
    labels = np.array([5, 9, 5, 2, 9])
    keys = pd.DataFrame({"age": [40, 20, 40, 30, 20], "sex": ["F", "M", "F", "M", "M"]})
    # sorted by age: label 9 (20) first, then 2 (30), then 5 (40)
    assert relabel_in_order(labels, keys).tolist() == [2, 0, 2, 1, 0]


def test_merge_without_any_diverse_group_merges_everything():
    # runs of "x"-only and "y"-only groups: no pool becomes diverse, no host exists
    present = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=bool)
    assert merge_for_diversity([present], 2).tolist() == [0, 0, 0, 0]


# ---------------------------------------------------------------------------- max_rule_probability

from itertools import combinations


def _planted_frame(seed, n=400, strength=1.0):
    """Two QIs (zone, band); income planted low in zone a, job planted x on the pair (b, 1)."""
    rng = np.random.default_rng(seed)
    zone = rng.choice(["a", "b", "c", "d"], n)
    band = rng.choice(["1", "2", "3"], n)
    income = np.where(rng.random(n) < 0.6, "low", "high")
    income = np.where((zone == "a") & (rng.random(n) < strength), "low", income)
    job = rng.choice(["x", "y", "z"], n)
    job = np.where((zone == "b") & (band == "1") & (rng.random(n) < strength), "x", job)
    labels = pd.factorize(pd.Series(zone) + band + (rng.integers(0, 2, n)).astype(str))[0]
    return labels, pd.DataFrame({"zone": zone, "band": band}), pd.DataFrame({"income": income,
                                                                             "job": job})


def _counted_rules(broken, qis, alpha, most=2, min_support=1):
    """Brute force, as a reader of the QIT and the STs counts: for every antecedent of 1..most
    QI values (the QIT rows holding them, at least min_support) and every sensitive value, the
    value's share among those rows whose value is known (a NULL is no value), each row counting
    its gid's ST shares."""
    qit = qis.assign(gid=broken.gid_)
    found = []
    for attribute, table in broken.sensitive_tables_.items():
        total = table.groupby("gid")["count"].sum()
        known = table[table["value"].notna()].groupby("gid")["count"].sum() / total
        for value in table["value"].dropna().unique():
            share = (table[table["value"] == value].set_index("gid")["count"] / total)
            for r in range(1, most + 1):
                for columns in combinations(qis.columns, r):
                    for key, rows in qit.groupby(list(columns)):
                        known_rows = rows["gid"].map(known).fillna(0).sum()
                        if len(rows) < min_support or known_rows == 0:
                            continue
                        p = rows["gid"].map(share).fillna(0).sum() / known_rows
                        if p >= alpha - 1e-12:
                            found.append((columns, key, attribute, value, p))
    return found


def test_nulls_do_not_dilute_a_rule():
    """A QI value whose known sensitive values are almost all one value, hidden among many NULLs
    (the review's case: 100 hiv, 1 other, 99 NULL). Counted over known values it is a rule of
    0.99; max_rule_probability must merge it away."""
    n = 600
    zone = np.where(np.arange(n) < 200, "a", np.where(np.arange(n) % 2, "b", "c"))
    dx = np.where(np.arange(n) % 2, "flu", "cold").astype(object)
    first = np.arange(200)
    dx[first] = np.where(first % 2, None, "hiv")
    dx[0] = "flu"
    labels = pd.factorize(pd.Series(zone) + (np.arange(n) % 4).astype(str))[0]
    qis, sensitive = pd.DataFrame({"zone": zone}), pd.DataFrame({"dx": dx})
    plain = BreakMerge(k=5).fit(labels, sensitive)
    assert any(f[3] == "hiv" and f[4] > 0.98 for f in _counted_rules(plain, qis, 0.9, most=1))
    broken = BreakMerge(k=5, max_rule_probability=0.9).fit(labels, sensitive, qis)
    assert _counted_rules(broken, qis, 0.9, most=1) == []


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), strength=st.sampled_from([0.95, 1.0]))
def test_max_rule_probability_leaves_no_rule_a_reader_can_count(seed, strength):
    labels, qis, sensitive = _planted_frame(seed, strength=strength)
    plain = BreakMerge(k=None).fit(labels, sensitive)
    broken = BreakMerge(k=None, max_rule_probability=0.9).fit(labels, sensitive, qis)
    assert _counted_rules(broken, qis, 0.9) == []
    check = broken.rule_check_
    assert check["rules_before"] == len(_counted_rules(plain, qis, 0.9))
    assert all(r["probability"] < 0.9 for r in check["residual_rules"])
    assert broken.group_sizes_.sum() == len(labels)  # merges only regroup rows


def test_planted_rules_are_counted_without_max_rule_probability():
    labels, qis, sensitive = _planted_frame(1)
    found = _counted_rules(BreakMerge(k=None).fit(labels, sensitive), qis, 0.9)
    assert any(f[0] == ("zone",) and f[2] == "income" for f in found)
    assert any(f[0] == ("zone", "band") and f[2] == "job" for f in found)


def test_a_rule_on_a_whole_class_is_checked_whatever_the_antecedent_size():
    """job = x is planted on the pair (zone b, band 1) only: antecedents of one value do not
    reach 0.9. With two QIs the pair is the whole QI class, which an attacker who knows a
    target's QIs reads, so it is checked even with max_rule_antecedents = 1."""
    labels, qis, sensitive = _planted_frame(4)
    sensitive["income"] = np.where(np.arange(len(labels)) % 2, "low", "high")   # no zone rule
    plain = BreakMerge(k=None).fit(labels, sensitive)
    assert _counted_rules(plain, qis, 0.9, most=1) == []
    assert any(f[0] == ("zone", "band") for f in _counted_rules(plain, qis, 0.9, most=2))
    for most in (1, 2):
        broken = BreakMerge(k=None, max_rule_probability=0.9, max_antecedents=most).fit(
            labels, sensitive, qis)
        assert _counted_rules(broken, qis, 0.9, most=2) == []
        assert broken.rule_check_["antecedent_sizes"] == [1, 2]


def _decided_by_three_qis(seed, n=300):
    """Three QIs; income decided (95 %) by the parity of all three together: single values and
    pairs see both incomes, each class of (zone, band, shift) almost only one."""
    rng = np.random.default_rng(seed)
    zone, band, shift = rng.integers(0, 4, n), rng.integers(0, 3, n), rng.integers(0, 2, n)
    odd = ((zone + band + shift) % 2 == 1) ^ (rng.random(n) < 0.05)
    qis = pd.DataFrame({"zone": np.array(list("abcd"))[zone], "band": band.astype(str),
                        "shift": np.array(["day", "night"])[shift]})
    sensitive = pd.DataFrame({"income": np.where(odd, "high", "low"),
                              "job": rng.choice(["x", "y", "z"], n)})
    labels = pd.factorize(qis["zone"] + qis["band"] + qis["shift"])[0]
    return labels, qis, sensitive


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), alpha=st.sampled_from([0.7, 0.8, 0.9]),
       most=st.sampled_from([1, 2]))
def test_no_antecedent_of_any_size_reaches_alpha(seed, alpha, most):
    """alpha bounds every antecedent of 1..all QI values a reader counts, whatever
    max_rule_antecedents: the whole class is checked, and any antecedent is a union of classes."""
    labels, qis, sensitive = _decided_by_three_qis(seed)
    broken = BreakMerge(k=None, max_rule_probability=alpha, max_antecedents=most).fit(
        labels, sensitive, qis)
    assert _counted_rules(broken, qis, alpha, most=3) == []
    kept = broken.rule_check_["class_detail_kept"]
    assert all(0 <= kept[a] <= broken.rule_check_["class_detail_kept_before"][a] <= 1
               for a in kept)


def test_class_detail_kept_is_one_per_class_and_zero_for_one_group():
    labels, _, sensitive = _decided_by_three_qis(1)
    group = np.unique(labels, return_inverse=True)[1].ravel()
    values = {c: pd.Index(sorted(sensitive[c].unique())) for c in sensitive}
    histograms = {c: np.stack([np.bincount(values[c].get_indexer(sensitive[c][group == g]),
                                           minlength=len(values[c]))
                               for g in range(group.max() + 1)]) for c in sensitive}
    n = group.max() + 1
    assert class_detail_kept(histograms, values, np.arange(n)) == {"income": 1.0, "job": 1.0}
    assert class_detail_kept(histograms, values, np.zeros(n, dtype=int)) == \
        {"income": 0.0, "job": 0.0}


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), alpha=st.sampled_from([0.5, 0.7, 0.9]))
def test_released_rules_equal_the_brute_force_count(seed, alpha):
    labels, qis, sensitive = _planted_frame(seed, n=120)
    broken = BreakMerge(k=None).fit(labels, sensitive)
    first = np.unique(labels, return_index=True)[1]
    group_qis = qis.iloc[first].reset_index(drop=True)
    codes = {c: pd.factorize(sensitive[c], sort=True) for c in sensitive}
    values = {c: pd.Index(u) for c, (_, u) in codes.items()}
    group = np.unique(labels, return_inverse=True)[1].ravel()
    histograms = {c: np.stack([np.bincount(codes[c][0][group == g], minlength=len(values[c]))
                               for g in range(first.size)]) for c in sensitive}
    rules = released_rules(group_qis, np.bincount(group), np.arange(first.size), histograms,
                           values, threshold=alpha, min_support=3)
    expected = _counted_rules(BreakMerge(k=None).fit(labels, sensitive), qis, alpha, min_support=3)
    assert broken.n_merged_ == 0
    assert len(rules) == len(expected)
    assert sorted(round(p, 9) for p in rules["probability"]) == \
        sorted(round(f[4], 9) for f in expected)


def test_max_rule_probability_refuses_a_base_rate_above_it():
    labels, qis, sensitive = _planted_frame(2)
    sensitive["job"] = np.where(np.arange(len(labels)) % 25 == 0, "y", "x")  # 96% x
    with pytest.raises(InsufficientData, match="job = 'x'.*0.960") as err:
        BreakMerge(k=None, max_rule_probability=0.9).fit(labels, sensitive, qis)
    assert "above 0.960" in err.value.hint


def test_max_rule_probability_needs_the_released_qis():
    labels, _, sensitive = _planted_frame(3)
    with pytest.raises(InvalidParameter, match="released QI values"):
        BreakMerge(max_rule_probability=0.9).fit(labels, sensitive)
    with pytest.raises(InvalidParameter, match="max_rule_probability"):
        BreakMerge(max_rule_probability=1.5).fit(labels, sensitive)
