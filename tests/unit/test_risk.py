"""The risk formulas (plpy_anon/core/risk.py) against brute force in pandas, record by record and
class by class, on random relations (hypothesis)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import interrupts, risk
from plpy_anon.core.errors import InvalidParameter
from tests.helpers import CountingCheck, Interrupted

frames = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 4)),
                  min_size=1, max_size=60).map(lambda rows: pd.DataFrame(rows, columns=["a", "b", "s"]))


def histogram(df):
    sizes = df.groupby(["a", "b"]).size()
    h = sizes.value_counts()
    return h.index.to_numpy(), h.to_numpy()


def class_value(df):
    cv = df.groupby(["a", "b", "s"]).size().reset_index(name="n")
    cid = cv.groupby(["a", "b"]).ngroup().to_numpy()
    vid = cv["s"].rank(method="dense").astype(int).to_numpy() - 1
    return cid, vid, cv["n"].to_numpy()


@settings(max_examples=150, deadline=None)
@given(frames, st.sampled_from([0.05, 0.2, 0.5, 1.0]), st.integers(0, 500))
def test_class_figures_match_record_by_record(df, threshold, extra):
    size = df.groupby(["a", "b"])["a"].transform("size")         # each record's class size
    population = len(df) + extra
    f = risk.class_figures(*histogram(df), risk_threshold=threshold, population=population)
    assert f["rows"] == len(df)
    assert f["classes"] == df.groupby(["a", "b"]).ngroups
    assert f["smallest_class"] == size.min()
    for x in (2, 5, 10):
        assert f[f"records_in_classes_below_{x}"] == (size < x).sum()
    assert f["prosecutor_risk_max"] == pytest.approx((1 / size).max())
    assert f["prosecutor_risk_avg"] == pytest.approx((1 / size).mean())
    assert f["prosecutor_records_at_risk"] == (1 / size > threshold).sum()
    big_f = size * population / len(df)
    assert f["journalist_risk_max"] == pytest.approx((1 / big_f).max())
    assert f["journalist_records_at_risk"] == (1 / big_f > threshold).sum()
    assert f["marketer_risk"] == pytest.approx((1 / big_f).mean())
    # never above the prosecutor's: the population holds at least the sample
    assert f["journalist_risk_max"] <= f["prosecutor_risk_max"] + 1e-12


def brute_sensitive(df, ordered, c):
    values = sorted(df["s"].unique())
    q = df["s"].value_counts(normalize=True).reindex(values, fill_value=0).to_numpy()
    distinct, entropies, recursive, emds = [], [], [], []
    for _, g in df.groupby(["a", "b"]):
        counts = g["s"].value_counts()
        distinct.append(len(counts))
        p = counts / counts.sum()
        entropies.append(-(p * np.log(p)).sum())
        r = sorted(counts.tolist(), reverse=True)
        recursive.append(max([l for l in range(1, len(r) + 1) if r[0] < c * sum(r[l - 1:])], default=0))
        pv = g["s"].value_counts(normalize=True).reindex(values, fill_value=0).to_numpy()
        if ordered:
            m = len(values)
            emds.append(0 if m == 1 else sum(abs(sum(pv[j] - q[j] for j in range(i + 1)))
                                             for i in range(m)) / (m - 1))
        else:
            emds.append(0.5 * sum(abs(pv - q)))
    return {"distinct_l": min(distinct), "entropy_l": math.exp(min(entropies)),
            "recursive_cl_l": min(recursive), "t_closeness": max(emds)}


@settings(max_examples=150, deadline=None)
@given(frames, st.booleans(), st.sampled_from([0.5, 1.0, 1.5, 3.0]), st.sampled_from([1, 3, 1000]),
       st.none() | st.integers(0, 2**32 - 1))
def test_sensitive_figures_match_brute_force(df, ordered, c, chunk, shuffle):
    """In class order or not (``shuffle``: the pairs in a random order), in ranges of classes of
    any size, the figures are those counted class by class."""
    pairs = class_value(df)
    if shuffle is not None:
        order = np.random.default_rng(shuffle).permutation(len(pairs[0]))
        pairs = tuple(column[order] for column in pairs)
    got = risk.sensitive_figures(*pairs, ordered=ordered, c=c, chunk_cells=chunk)
    want = brute_sensitive(df, ordered, c)
    assert got["distinct_l"] == want["distinct_l"]
    assert got["entropy_l"] == pytest.approx(want["entropy_l"])
    assert got["recursive_cl_l"] == want["recursive_cl_l"]
    assert got["t_closeness"] == pytest.approx(want["t_closeness"], abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(frames, st.booleans(), st.sampled_from([1, 3, 1000]), st.lists(st.integers(1, 20), max_size=8))
def test_sensitive_ranges_fed_in_any_ranges_of_classes_give_the_whole_table_figures(
        df, ordered, chunk, widths):
    """The classes given a range at a time (ranges of any widths, each with its own class ids
    from 0), the table's distribution known first: exactly the figures of the whole table."""
    cid, vid, n = class_value(df)
    ranges = risk.SensitiveRanges(np.bincount(vid, weights=n), ordered=ordered, chunk_cells=chunk)
    n_classes, lo = int(cid.max()) + 1, 0
    for width in [*widths, n_classes]:
        hi = min(n_classes, lo + width)
        if hi > lo:
            inside = (cid >= lo) & (cid < hi)
            ranges.add(cid[inside] - lo, vid[inside], n[inside], hi - lo)
        lo = hi
    assert ranges.figures() == risk.sensitive_figures(cid, vid, n, ordered=ordered)


def test_textbook_values():
    # one class with the whole distribution: t = 0; two classes splitting a binary SA: t = 1/2
    df = pd.DataFrame({"a": [0, 0, 1, 1], "b": 0, "s": [0, 0, 1, 1]})
    f = risk.sensitive_figures(*class_value(df), ordered=False)
    assert f == {"distinct_l": 1, "entropy_l": 1.0, "recursive_cl_l": 1, "t_closeness": 0.5}
    # ordered: {0} vs uniform over 0,1,2 -> (|1-1/3| + |1-2/3| + 0) / 2 = 1/2
    df = pd.DataFrame({"a": [0, 1, 1, 1, 1, 1], "b": 0, "s": [0, 1, 1, 2, 2, 0]})
    assert risk.sensitive_figures(*class_value(df), ordered=True)["t_closeness"] == pytest.approx(0.5)


def test_empty_and_bad_population():
    f = risk.class_figures([], [], population=10)
    assert f["rows"] == 0 and f["classes"] == 0 and f["smallest_class"] is None
    with pytest.raises(InvalidParameter, match="population 3 is smaller"):
        risk.class_figures([2], [2], population=3)


def test_a_class_whose_sensitive_values_are_all_null_holds_no_value():
    """NULL pairs are left out before the figures (class_counts.known): class 2, all NULL, has
    no pair left and must still count, with 0 values."""
    figures = risk.sensitive_figures([0, 0, 1, 1], [0, 1, 0, 1], [3, 2, 4, 1], ordered=False,
                                     n_classes=3)
    assert figures["distinct_l"] == 0 and figures["recursive_cl_l"] == 0
    assert risk.sensitive_figures([0, 0, 1, 1], [0, 1, 0, 1], [3, 2, 4, 1],
                                  ordered=False)["distinct_l"] == 2


def dense_figures(cid, vid, cnt, n_classes, ordered, c):
    """The figures from the whole class x value matrix, row by row (the oracle of the pairs'
    computation): a class without a pair is a row of zeros, no mass."""
    m = int(vid.max()) + 1
    table = np.zeros((n_classes, m))
    np.add.at(table, (cid, vid), cnt)
    q = table.sum(axis=0) / table.sum()
    total = table.sum(axis=1, keepdims=True)
    p = np.divide(table, total, out=np.zeros_like(table), where=total > 0)
    d = p - q
    if ordered:
        emd = np.abs(np.cumsum(d, axis=1)).sum(axis=1) / (m - 1) if m > 1 else np.zeros(n_classes)
    else:
        emd = 0.5 * np.abs(d).sum(axis=1)
    logs = np.log(p, out=np.zeros_like(p), where=p > 0)
    recursive = []
    for row in table:
        r = sorted(row[row > 0], reverse=True)
        recursive.append(max([l for l in range(1, len(r) + 1) if r[0] < c * sum(r[l - 1:])],
                             default=0))
    return {"distinct_l": int((table > 0).sum(axis=1).min()),
            "entropy_l": math.exp((-(p * logs).sum(axis=1)).min()),
            "recursive_cl_l": min(recursive), "t_closeness": float(emd.max())}


@st.composite
def class_value_tables(draw):
    """(class ids, value ids, counts, classes): up to 12 classes, some without a pair (their
    values NULL), each with any subset of up to 40 values, in class order or not."""
    n_values = draw(st.integers(1, 40))
    n_classes = draw(st.integers(1, 12))
    rows = []
    for k in range(n_classes):
        values = draw(st.sets(st.integers(0, n_values - 1), max_size=n_values))
        rows += [(k, v, draw(st.integers(1, 9))) for v in sorted(values)]
    if not rows:
        rows = [(draw(st.integers(0, n_classes - 1)), draw(st.integers(0, n_values - 1)), 1)]
    rows = draw(st.permutations(rows))
    cid, vid, cnt = (np.array(column, dtype=np.int64) for column in zip(*rows))
    return cid, vid, cnt, n_classes


@settings(max_examples=300, deadline=None)
@given(class_value_tables(), st.booleans(), st.sampled_from([0.5, 1.0, 3.0]),
       st.sampled_from([1, 2, 7, 1 << 20]))
def test_figures_from_the_pairs_equal_those_of_the_dense_class_value_matrix(
        table, ordered, c, chunk):
    """Ordered or not, values present in few classes, classes without a pair, pairs in any order
    and ranges of any number of pairs: the figures equal those of the whole matrix."""
    cid, vid, cnt, n_classes = table
    got = risk.sensitive_figures(cid, vid, cnt, ordered=ordered, c=c, chunk_cells=chunk,
                                 n_classes=n_classes)
    want = dense_figures(cid, vid, cnt, n_classes, ordered, c)
    assert got["distinct_l"] == want["distinct_l"]
    assert got["recursive_cl_l"] == want["recursive_cl_l"]
    assert got["entropy_l"] == pytest.approx(want["entropy_l"], rel=1e-9, abs=1e-9)
    assert got["t_closeness"] == pytest.approx(want["t_closeness"], rel=0, abs=1e-9)


def test_a_cancel_pending_stops_the_figures_between_ranges_of_classes():
    """A release with one distinct value per row: a cancel raised by the installed check stops
    the figures before they go through all their ranges."""
    rows, check = 10_000, CountingCheck(raise_at=3)
    with interrupts.checking(check), pytest.raises(Interrupted):
        risk.sensitive_figures(np.arange(rows) // 5, np.arange(rows), np.ones(rows, dtype=np.int64),
                               ordered=True, chunk_cells=100)
    assert check.calls == 3
