"""Knowledge-breach probabilities and the adversary attack (paper 003, worked example)."""

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.breach import (
    attack_break_merge,
    attack_plain,
    break_merge_breach,
    combination_probability,
    plain_breach,
)
from plpy_anon.core.breakmerge import BreakMerge
from plpy_anon.core.errors import InvalidParameter

# Paper 003, Table II in spirit: group 1 = five women (Jessica is row 0, State-gov), group 2 = five
# men. Government ST as the paper describes it: State-gov x2, Federal-gov x1, Private x1 in group 1;
# Federal-gov x1, Private x3 in group 2. Two State-gov rows are Never-married and <=50K.
ROWS = [
    # group, age, sex, workclass, marital_status, income
    (1, "[30-40]", "F", "State-gov", "Never-married", "<=50K"),
    (1, "[30-40]", "F", "State-gov", "Never-married", "<=50K"),
    (1, "[30-40]", "F", "Federal-gov", "Divorced", ">50K"),
    (1, "[30-40]", "F", "Private", "Married-civ-spouse", "<=50K"),
    (1, "[30-40]", "F", "Self-emp", "Widowed", "<=50K"),
    (2, "[30-40]", "M", "Federal-gov", "Married-civ-spouse", ">50K"),
    (2, "[30-40]", "M", "Private", "Married-civ-spouse", ">50K"),
    (2, "[30-40]", "M", "Private", "Never-married", "<=50K"),
    (2, "[30-40]", "M", "Private", "Divorced", "<=50K"),
    (2, "[30-40]", "M", "Local-gov", "Married-civ-spouse", ">50K"),
]
TABLE = pd.DataFrame(ROWS, columns=["group", "age", "sex", "workclass", "marital_status", "income"])
SENSITIVE = ["workclass", "marital_status", "income"]
QIS = ["age", "sex"]


@pytest.fixture(scope="module")
def broken():
    return BreakMerge().fit(TABLE["group"].to_numpy(), TABLE[SENSITIVE])


def _row(report, target, known):
    mask = report["target"].eq(target) & (
        report["known"].isna() if known is None else report["known"].eq(known)
    )
    assert mask.sum() == 1
    return report[mask].iloc[0]


def test_jessica_salary_known_group_only(broken):
    # "she belongs to the first group ... salary <=50K with probability 4/5"
    gid = broken.gid_[0]
    assert combination_probability(
        5, broken.sensitive_tables_, gid, {"income": "<=50K"}
    ) == pytest.approx(4 / 5)


def test_jessica_joint_probabilities_multiply(broken):
    gid = broken.gid_[0]
    sts = broken.sensitive_tables_
    never_low = combination_probability(
        5, sts, gid, {"marital_status": "Never-married", "income": "<=50K"}
    )
    divorced_high = combination_probability(
        5, sts, gid, {"marital_status": "Divorced", "income": ">50K"}
    )
    assert never_low == pytest.approx(float(Fraction(8, 25)))
    assert divorced_high == pytest.approx(float(Fraction(1, 25)))


def test_plain_release_reveals_jessica_with_state_gov():
    # Plain table: State-gov in group 1 -> (Never-married, <=50K) with probability 1.
    report = plain_breach(TABLE["group"], TABLE[SENSITIVE], threshold=0.99)
    joint = _row(report, "marital_status,income", "workclass")
    assert joint["max_probability"] == pytest.approx(1.0)
    # group 1: all 5 rows determined; group 2: Federal 1, Local 1, Private 3 rows -> 1/3 each
    assert joint["mean_probability"] == pytest.approx((5 + 1 + 1 + 3 * (1 / 3)) / 10)
    assert joint["n_above"] == 7


def test_plain_group_only_by_hand():
    report = plain_breach(TABLE["group"], TABLE[SENSITIVE], threshold=0.7)
    income = _row(report, "income", None)
    # group 1: 4/5 <=50K; group 2: 3/5 >50K
    assert income["max_probability"] == pytest.approx(0.8)
    assert income["mean_probability"] == pytest.approx(0.7)
    assert income["n_above"] == 5


def test_break_merge_joint_given_known_value(broken):
    report = break_merge_breach(broken.group_sizes_, broken.sensitive_tables_, threshold=0.35)
    joint = _row(report, "marital_status,income", "workclass")
    # group 1: 2/5 * 4/5 = 8/25; group 2: 3/5 * 3/5 = 9/25 (Married-civ-spouse, >50K)
    assert joint["max_probability"] == pytest.approx(9 / 25)
    assert joint["mean_probability"] == pytest.approx((5 * 8 / 25 + 5 * 9 / 25) / 10)
    assert joint["n_above"] == 5
    # Knowing workclass does not move a single attribute's breach in Break-Merge.
    assert _row(report, "income", "workclass")["mean_probability"] == pytest.approx(
        _row(report, "income", None)["mean_probability"]
    )


def test_attack_worked_example(broken):
    qit = TABLE[QIS].assign(gid=broken.gid_)
    plain = attack_plain(TABLE, TABLE, QIS, "workclass", "income")
    bm = attack_break_merge(qit, broken.sensitive_tables_, TABLE, QIS, "workclass", "income")
    # plain: only the Private men (2 x <=50K, 1 x >50K) are not certain; the >50K one is missed
    assert plain.tolist() == [1, 1, 1, 1, 1, 1, 0, 1, 1, 1]
    # Break-Merge: majority value of each group only
    assert bm.tolist() == [1, 1, 0, 1, 1, 1, 1, 0, 0, 1]


def test_attack_ties_score_fractionally():
    release = pd.DataFrame({"q": ["a"] * 4, "k": ["x"] * 4, "t": ["u", "u", "v", "v"]})
    assert attack_plain(release, release, ["q"], "k", "t").tolist() == [0.5] * 4


def test_threshold_validated():
    with pytest.raises(InvalidParameter, match="threshold"):
        plain_breach(TABLE["group"], TABLE[SENSITIVE], threshold=0)


# ---------------------------------------------------------------------------------------------
# Properties on random data


@st.composite
def partitioned_tables(draw):
    n = draw(st.integers(min_value=4, max_value=40))
    n_groups = draw(st.integers(min_value=1, max_value=4))
    cols = {
        "group": draw(st.lists(st.integers(0, n_groups - 1), min_size=n, max_size=n)),
        "a": draw(st.lists(st.sampled_from("xyz"), min_size=n, max_size=n)),
        "b": draw(st.lists(st.sampled_from("pq"), min_size=n, max_size=n)),
        "c": draw(st.lists(st.sampled_from("uvw"), min_size=n, max_size=n)),
    }
    frame = pd.DataFrame(cols)
    frame["qi"] = "g" + frame["group"].astype(str)
    return frame


def _brute_force_attack(frame, known, target):
    """Loop over targets, written independently of the vectorized implementation."""
    scores = []
    for _, person in frame.iterrows():
        pool = frame[(frame["qi"] == person["qi"]) & (frame[known] == person[known])]
        counts = pool[target].value_counts()
        best = counts[counts == counts.max()].index
        scores.append((person[target] in best) / len(best))
    return np.array(scores)


@settings(max_examples=40, deadline=None)
@given(partitioned_tables(), st.sampled_from([("a", "b"), ("b", "c"), ("c", "a")]))
def test_plain_attack_matches_brute_force(frame, pair):
    known, target = pair
    got = attack_plain(frame, frame, ["qi"], known, target)
    np.testing.assert_allclose(got, _brute_force_attack(frame, known, target))


@settings(max_examples=40, deadline=None)
@given(
    partitioned_tables(), st.sampled_from([("a", "b"), ("b", "c"), ("c", "a")]), st.integers(1, 3)
)
def test_break_merge_never_raises_attack_success(frame, pair, l):
    known, target = pair
    feasible = min(frame[c].nunique() for c in "abc") >= l
    bm = BreakMerge(l=l if feasible else None).fit(frame["group"], frame[["a", "b", "c"]])
    qit = frame[["qi"]].assign(gid=bm.gid_)
    plain = attack_plain(frame, frame, ["qi"], known, target).mean()
    broken = attack_break_merge(qit, bm.sensitive_tables_, frame, ["qi"], known, target).mean()
    assert broken <= plain + 1e-12


@settings(max_examples=40, deadline=None)
@given(partitioned_tables())
def test_group_only_breach_agrees_between_row_and_st_computations(frame):
    # Without merging, case (a) read from the rows (plain) and from the STs (Break-Merge) agree.
    bm = BreakMerge().fit(frame["group"], frame[["a", "b", "c"]])
    plain = plain_breach(frame["group"], frame[["a", "b", "c"]], threshold=0.5)
    broken = break_merge_breach(bm.group_sizes_, bm.sensitive_tables_, threshold=0.5)
    group_only = lambda r: r[r["known"].isna()].set_index("target").drop(columns="known")
    pd.testing.assert_frame_equal(group_only(plain), group_only(broken))
    # ... and every Break-Merge single-attribute breach is at most the plain one given the same
    # known value (a plain adversary can restrict to the known value; a BM one cannot). Not so for
    # the joint of several attributes: a product of marginals can exceed the largest joint cell.
    single = lambda r: r[r["known"].notna() & ~r["target"].str.contains(",")]
    known = single(plain).set_index(["target", "known"])
    known_bm = single(broken).set_index(["target", "known"])
    assert (known_bm["mean_probability"] <= known["mean_probability"] + 1e-12).all()
