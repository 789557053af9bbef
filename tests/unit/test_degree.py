"""Degree of anonymisation, its decomposition over hierarchies, and the k step (paper 001)."""

import itertools
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.degree import (
    DegreeDecomposition,
    DegreeRelease,
    GeneralizationTable,
    anonymisation_degree,
    class_sizes,
    interval_hierarchy,
    level_degrees,
    select_level,
    value_set_hierarchy,
)
from plpy_anon.core.errors import InvalidParameter, UndefinedObject
from plpy_anon.core.hierarchy import Hierarchy
from plpy_anon.core.trust import TrustProjection

fast = settings(max_examples=40, deadline=None)
unit = st.floats(0.0, 1.0, allow_nan=False)


# --- Definition 2.1 --------------------------------------------------------------------------

def test_equal_weights_give_level_over_height():
    assert level_degrees(4) == pytest.approx([0, 0.25, 0.5, 0.75, 1])


def test_weighted_levels_by_hand():
    # steps weigh 1 and 3: one step up costs 1/4, two steps (to the root) cost everything
    assert level_degrees(2, [1, 3]) == pytest.approx([0, 0.25, 1])
    assert anonymisation_degree(1, 2, level_degrees(2, [1, 3])) == pytest.approx(0.75)


@fast
@given(st.lists(st.floats(0.1, 10), min_size=1, max_size=6), st.data())
def test_degree_of_consecutive_moves_adds_up(weights, data):
    degrees = level_degrees(len(weights), weights)
    p, q, r = sorted(data.draw(st.lists(st.integers(0, len(weights)), min_size=3, max_size=3)))
    assert anonymisation_degree(p, q, degrees) + anonymisation_degree(q, r, degrees) == \
        pytest.approx(anonymisation_degree(p, r, degrees))
    assert degrees[0] == 0 and degrees[-1] == pytest.approx(1)
    assert (np.diff(degrees) > 0).all()


def test_level_weights_must_match_the_height():
    with pytest.raises(InvalidParameter, match="level weights of 'age' must be 2 positive numbers"):
        level_degrees(2, [1, 2, 3], "age")
    with pytest.raises(InvalidParameter, match="positive"):
        level_degrees(2, [1, 0])
    with pytest.raises(InvalidParameter, match="positive"):
        level_degrees(2, ["a", "b"])


def test_select_level_takes_the_interval_containing_the_degree():
    degrees = level_degrees(4)  # boundaries 0, .25, .5, .75, 1
    assert select_level([0, 0.2, 0.25, 0.6, 0.99, 1.0], degrees).tolist() == [0, 0, 1, 2, 3, 4]


# --- decomposition ---------------------------------------------------------------------------

def _decomposition(priorities, heights, min_share=0.1):
    names = [f"a{i}" for i in range(len(priorities))]
    degrees = {name: level_degrees(h) for name, h in zip(names, heights)}
    return DegreeDecomposition(min_share).fit(pd.Series(priorities, index=names), degrees)


def test_two_attributes_by_hand():
    # shares 1 - P + 0.1: 0.2 and 1.0; D = 0.3 -> t with (0.2 t + t) / 2 = 0.3 -> t = 0.5
    model = _decomposition([0.9, 0.1], [2, 4])
    assert model.attribute_degrees(0.3).tolist() == pytest.approx([0.1, 0.5])
    assert model.levels(0.3).tolist() == [0, 2]
    # a fully suppressed attribute passes the rest on: D = 0.75 -> (min(1, .2t) + min(1, t))/2
    assert model.attribute_degrees(0.75).tolist() == pytest.approx([0.5, 1.0])


priority_lists = st.lists(unit, min_size=1, max_size=6)


@fast
@given(priority_lists, unit, st.floats(0.01, 0.5))
def test_attribute_degrees_average_to_the_table_degree(priorities, degree, min_share):
    model = _decomposition(priorities, [3] * len(priorities), min_share)
    degrees = model.attribute_degrees(degree).to_numpy()
    assert ((degrees >= 0) & (degrees <= 1 + 1e-12)).all()
    assert degrees.mean() == pytest.approx(degree, abs=1e-9)
    # lower priority never carries less of the degree
    order = np.argsort(priorities)
    assert (np.diff(degrees[order]) <= 1e-12).all()


views = st.integers(1, 5).flatmap(lambda m: st.tuples(
    st.lists(unit, min_size=m, max_size=m), st.lists(st.integers(1, 5), min_size=m, max_size=m)))


@fast
@given(views, unit)
def test_degree_of_view_is_definition_2_1_of_the_levels_applied(view, degree):
    priorities, heights = view
    model = _decomposition(priorities, heights)
    levels = model.levels(degree)
    by_definition = np.mean([anonymisation_degree(0, int(levels[n]), model.degrees_[n])
                             for n in model.attributes_])
    assert model.degree_of_view(levels) == pytest.approx(by_definition, abs=1e-12)
    # a suppressed row counts as fully generalized on every attribute
    assert model.degree_of_view(levels, 1.0) == pytest.approx(1.0)


@fast
@given(views, unit)
def test_decomposition_never_exceeds_and_nearly_reaches_the_requested_degree(view, degree):
    priorities, heights = view
    model = _decomposition(priorities, heights)
    levels = model.levels(degree)
    delivered = model.degree_of_view(levels)
    assert delivered <= degree + 1e-9
    # the loss is the rounding down inside each attribute's level interval (capped at the root)
    widths = [model.degrees_[n][min(int(levels[n]) + 1, len(model.degrees_[n]) - 1)]
              - model.degrees_[n][int(levels[n])] for n in model.attributes_]
    shares = model.attribute_degrees(degree)
    assert degree - delivered <= np.mean(widths) + 1e-9 or shares.mean() < degree - 1e-9
    # re-decomposing the delivered degree never gives a coarser view
    assert (model.levels(delivered) <= levels).all()


@fast
@given(views, unit, unit, st.floats(1, 5))
def test_more_trust_never_gives_a_coarser_view(view, trust_a, trust_b, gamma):
    priorities, heights = view
    model = _decomposition(priorities, heights)
    project = TrustProjection(gamma=gamma)
    low, high = sorted([trust_a, trust_b])
    assert (model.levels(project(high)) <= model.levels(project(low))).all()


def test_priority_one_without_min_share_is_never_generalized():
    model = _decomposition([1.0, 0.0], [2, 2], min_share=0.0)
    assert model.levels(1.0).tolist() == [0, 2]
    with pytest.raises(InvalidParameter, match="levels 0..2"):
        model.degree_of_view(pd.Series({"a0": 3, "a1": 0}))


@pytest.mark.parametrize("degree", [-0.1, 1.1, float("nan")])
def test_degree_outside_unit_interval_is_rejected(degree):
    with pytest.raises(InvalidParameter, match=r"must lie in \[0, 1\]"):
        _decomposition([0.5], [2]).levels(degree)


# --- hierarchies -----------------------------------------------------------------------------

def _interval(label):
    lo, hi = re.fullmatch(r"\[([-0-9.]+),([-0-9.]+)\)", label).groups()
    return float(lo), float(hi)


@fast
@given(st.lists(st.integers(-10**7, 10**7), min_size=1, max_size=30), st.integers(1, 5))
def test_interval_hierarchy_nests_and_covers_every_value(values, n_levels):
    hierarchy = interval_hierarchy(values, n_levels)
    assert hierarchy.height == n_levels + 1
    for value in set(values):
        inner = (value, value + 1e-9)  # the value itself as a degenerate interval
        for level in range(1, n_levels + 1):
            lo, hi = _interval(hierarchy.ancestor(str(value), level))
            assert lo <= inner[0] and inner[1] <= hi  # contains the level below
            inner = (lo, hi)
        assert hierarchy.ancestor(str(value), n_levels + 1) == "*"
    top = {hierarchy.ancestor(str(v), n_levels) for v in values}
    assert len(top) <= 2  # the widest intervals split the range at most once


def test_uncovered_value_is_named():
    hierarchy = Hierarchy.from_paths([["F", "*"], ["M", "*"]])
    with pytest.raises(UndefinedObject, match="column 'sex' does not cover 1 value") as error:
        GeneralizationTable("sex", pd.Series(["F", "X", "M"]), hierarchy)
    assert "'X'" in error.value.detail


def test_ncp_by_hand():
    hierarchy = Hierarchy.from_paths([["a", "ab", "*"], ["b", "ab", "*"], ["c", "cd", "*"],
                                      ["d", "cd", "*"], ["e", "e", "*"]])
    table = GeneralizationTable("x", pd.Series(["a", "c", "e", "e"]), hierarchy)
    # level 1: ab (2 leaves), cd (2), e (1) -> penalties 1/4, 1/4, 0, 0
    assert table.ncp(1) == pytest.approx((0.25 + 0.25) / 4)
    assert table.ncp(1, kept=np.array([True, True, True, False])) == pytest.approx(1.5 / 4)
    assert table.ncp(2) == 1.0


def test_class_sizes_match_a_group_by():
    rng = np.random.default_rng(1)
    codes = [rng.integers(0, 3, 200), rng.integers(0, 5, 200), rng.integers(0, 2, 200)]
    frame = pd.DataFrame(np.column_stack(codes))
    expected = frame.groupby([0, 1, 2])[0].transform("size").to_numpy()
    assert class_sizes(codes).tolist() == expected.tolist()


# --- the release and the k step --------------------------------------------------------------

@pytest.fixture(scope="module")
def people():
    rng = np.random.default_rng(7)
    n = 300
    return pd.DataFrame({
        "age": rng.integers(18, 90, n),
        "sex": rng.choice(["F", "M"], n),
        "job": rng.choice(["a", "b", "c", "d"], n),
        "income": rng.integers(0, 2, n),  # not a quasi-identifier: passed through
    })


JOBS = Hierarchy.from_paths([["a", "ab", "*"], ["b", "ab", "*"], ["c", "cd", "*"], ["d", "cd", "*"]])
PRIORITIES = {"age": 0.2, "sex": 1.0, "job": 0.5}


def test_release_without_k_is_the_decomposition_view(people):
    release = DegreeRelease(0.4, PRIORITIES, hierarchies={"job": JOBS}).fit(people)
    assert release.levels_.tolist() == release.decomposition_.levels(0.4).tolist()
    assert release.kept_.all()
    released = release.transform(people)
    assert released["income"].tolist() == people["income"].tolist()
    assert set(released["job"]) <= {"a", "b", "c", "d", "ab", "cd", "*"}


def _released_levels(release, frame):
    """Each kept row's level per attribute, read back from the released labels: the level whose
    label of the row's value is the released one (ranges and sets of the hierarchy nest)."""
    released = release.transform(frame)
    kept = frame.loc[release.kept_].reset_index(drop=True)
    levels = {}
    for name, table in release.tables_.items():
        hierarchy = table.hierarchy
        values = kept[name].astype(str)
        levels[name] = [next(g for g in range(hierarchy.height + 1)
                             if hierarchy.ancestor(v, g) == label)
                        for v, label in zip(values, released[name])]
    return pd.DataFrame(levels), released


@settings(max_examples=15, deadline=None)
@given(unit, st.integers(2, 12), st.sampled_from([0.0, 0.02, 0.1]))
def test_k_step_yields_k_anonymous_rows_within_budget(people, degree, k, max_suppression):
    release = DegreeRelease(degree, PRIORITIES, hierarchies={"job": JOBS}, k=k,
                            max_suppression=max_suppression).fit(people)
    levels, released = _released_levels(release, people)
    sizes = released.groupby(["age", "sex", "job"]).size()  # checked on the output itself
    assert (sizes >= k).all()
    # every released label generalizes the row's own value, never below the requested level
    assert (levels.to_numpy() >= release.requested_levels_[list(levels)].to_numpy()).all()
    assert release.cost_["rows_suppressed"] <= max_suppression * len(people) + 1e-9 \
        or release.cost_["rows_suppressed"] < k  # only the root residue may exceed the budget
    assert release.cost_["rows_suppressed"] == len(people) - len(released)
    # Definition 2.1 from the released labels: mean over rows and attributes, suppressed = 1
    c = release.decomposition_.degrees_
    applied = np.column_stack([c[name][levels[name].to_numpy()] for name in levels]).mean(axis=1)
    by_hand = (applied.sum() + release.cost_["rows_suppressed"]) / len(people)
    assert release.view_degree_ == pytest.approx(by_hand, abs=1e-12)


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 7))
def test_local_recoding_only_touches_rows_of_small_classes(people, k):
    """Local, not whole-column: on a table where most rows are already in classes of k, the rows
    left at their values are exactly those whose class at the requested view has k rows."""
    rows = pd.concat([people.assign(age=30, job="a"), people.iloc[:7].assign(sex="M", job="b")],
                     ignore_index=True)
    rows.loc[len(people):, "age"] = np.arange(60, 67)     # 7 rows alone on age, alike otherwise
    release = DegreeRelease(0.0, PRIORITIES, hierarchies={"job": JOBS}, k=k,
                            max_suppression=0.0).fit(rows)
    sizes = rows.groupby(["age", "sex", "job"])["age"].transform("size").to_numpy()
    recoded = (release.row_levels_.to_numpy() > 0).any(axis=1)
    assert (recoded == (sizes < k)).all()
    assert release.cost_["rows_recoded"] == int((sizes < k).sum())
    assert release.levels_["age"] > 0 and (release.row_levels_["age"] == 0).mean() > 0.9


@settings(max_examples=25, deadline=None)
@given(unit, unit, st.integers(2, 12), st.sampled_from([0.0, 0.05]),
       st.sampled_from([PRIORITIES, {"age": 1.0, "sex": 0.0, "job": 0.3}]))
def test_k_step_keeps_monotonicity_in_trust(people, trust_a, trust_b, k, max_suppression,
                                            priorities):
    """More trust never gives a coarser release, row by row.

    Replaces the property "the per-attribute levels at higher trust are never above" of the
    whole-table k step: under local recoding an attribute has no single level (rows sit at
    different levels), so the property is now stated on every row -- stronger: each row, on each
    attribute, is released at a level no higher at the higher trust, the same rows are
    suppressed, hence the view degree (Definition 2.1) never rises -- and it falls strictly as
    soon as one kept row is released finer. It holds by construction: local recoding starts from
    the values whatever the trust and the release takes, per row, the coarser of that and the
    requested view, which is monotone in trust (test_more_trust_never_gives_a_coarser_view).
    """
    project = TrustProjection(gamma=2)
    low, high = sorted([trust_a, trust_b])
    coarse, fine = (DegreeRelease(project(t), priorities, hierarchies={"job": JOBS}, k=k,
                                  max_suppression=max_suppression).fit(people)
                    for t in (low, high))
    coarse_levels, _ = _released_levels(coarse, people)  # from the released labels
    fine_levels, _ = _released_levels(fine, people)
    assert (fine.kept_ == coarse.kept_).all()
    assert (fine_levels.to_numpy() <= coarse_levels.to_numpy()).all()
    assert fine.view_degree_ <= coarse.view_degree_ + 1e-12
    if (fine_levels.to_numpy() < coarse_levels.to_numpy()).any():
        assert fine.view_degree_ < coarse.view_degree_
    assert (fine.levels_ <= coarse.levels_).all()


def test_strictly_more_trust_gives_a_strictly_finer_release(people):
    """Where the requested views differ, so do the releases: at k = 5 on this table the view
    degree falls strictly across T = 0.2, 0.5, 0.8, 0.95 (the whole-table k step gave the two
    highest trust levels one view)."""
    project = TrustProjection(gamma=2)
    releases = [DegreeRelease(project(t), PRIORITIES, hierarchies={"job": JOBS}, k=5,
                              max_suppression=0.05).fit(people) for t in (0.2, 0.5, 0.8, 0.95)]
    requested = [tuple(r.requested_levels_) for r in releases]
    degrees = [r.view_degree_ for r in releases]
    for i in range(len(releases) - 1):
        if requested[i] != requested[i + 1]:
            assert degrees[i + 1] < degrees[i]


def test_level_weights_change_the_levels(people):
    # shares 0.9, 0.1, 0.6 (age, sex, job); D = 0.3 -> t = 0.9 / 1.6, d_job = 0.3375: below the
    # equal-weight boundary 0.5, above 0.1 once job's two steps weigh 1 and 9
    plain = DegreeRelease(0.3, PRIORITIES, hierarchies={"job": JOBS}).fit(people)
    cheap = DegreeRelease(0.3, PRIORITIES, hierarchies={"job": JOBS},
                          level_weights={"job": [1, 9]}).fit(people)
    assert cheap.decomposition_.degrees_["job"] == pytest.approx([0, 0.1, 1])
    assert plain.levels_["job"] == 0 and cheap.levels_["job"] == 1
    with pytest.raises(UndefinedObject, match="level weights for 'zip'"):
        DegreeRelease(0.3, PRIORITIES, level_weights={"zip": [1]}).fit(people)


def test_bad_release_input(people):
    with pytest.raises(UndefinedObject, match="'zip', which is not a column"):
        DegreeRelease(0.5, {"zip": 1}).fit(people)
    with pytest.raises(InvalidParameter, match="k must be at least 2, got 0"):
        DegreeRelease(0.5, PRIORITIES, k=0).fit(people)
    with pytest.raises(UndefinedObject, match="column 'job' does not cover 1 value"):
        DegreeRelease(0.5, PRIORITIES, hierarchies={"job": Hierarchy.from_paths(
            [["a", "*"], ["b", "*"], ["c", "*"]])}).fit(people)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f g", "NULL", "x,y", '"q"', ""]),
                min_size=1, max_size=60))
def test_value_sets_nest_and_each_holds_its_values(values):
    """Without a registered hierarchy a categorical column generalizes through nested value sets
    whose labels are PostgreSQL text[] literals of the values they hold."""
    hierarchy = value_set_hierarchy(pd.Series(values))
    assert set(hierarchy.leaves) == set(values) and hierarchy.root == "*"
    for leaf in hierarchy.leaves:
        chain = [hierarchy.ancestor(leaf, g) for g in range(hierarchy.height + 1)]
        assert chain[-1] == "*"
        held = [set(_parse_array(label)) for label in chain[1:-1] if label != leaf]
        assert all(leaf in members for members in held)
        assert all(a < b for a, b in itertools.pairwise(held))     # strictly nested
        assert all(len(members) >= 2 for members in held)           # no value alone in a set


def _parse_array(label):
    """A text[] literal's elements (the quoting set_label writes)."""
    assert label.startswith("{") and label.endswith("}")
    elements, current, quoted, i, body = [], "", False, 0, label[1:-1]
    while i < len(body):
        ch = body[i]
        if quoted and ch == "\\":
            current += body[i + 1]
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            elements.append(current)
            current = ""
        else:
            current += ch
        i += 1
    return elements + [current]


def test_degree_follows_trust_without_registered_hierarchies():
    """Categorical columns without a hierarchy used to be flat (value or *), so every degree below
    1 released them as they were and releases for very different trust were the same."""
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({
        "age": rng.integers(18, 90, 3000),
        "job": rng.choice([f"job{i}" for i in range(12)], 3000),
        "city": rng.choice([f"city{i}" for i in range(20)], 3000),
        "sex": rng.choice(["F", "M"], 3000)})
    priorities = {"age": 0.5, "job": 0.5, "city": 0.5, "sex": 0.5}
    projection = TrustProjection()
    reached = [DegreeRelease(projection(trust), priorities, k=5).fit(frame).view_degree_
               for trust in (0.65, 0.8, 0.95)]
    assert reached[0] > reached[1] > reached[2]
    requested = [DegreeRelease(d, priorities).fit(frame) for d in (0.3, 0.6, 0.9)]
    views = [r.decomposition_.degree_of_view(r.requested_levels_) for r in requested]
    assert views[0] < views[1] < views[2]
    assert all(view <= d + 1e-9 for view, d in zip(views, (0.3, 0.6, 0.9)))
