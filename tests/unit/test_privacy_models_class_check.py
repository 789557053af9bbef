"""The release check of the privacy models (core.privacy_models.ClassCheck) decides every class
from its (class, value, rows) pairs; the oracle is the dense class x value matrix, row by row,
through Models.satisfied / entropy / distinct_values / emd."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import interrupts
from plpy_anon.core import privacy_models as pm
from tests.helpers import CountingCheck, Interrupted


def dense_check(model: pm.Models, cid, vid, cnt, n_classes: int, n_values: int) -> dict:
    """The figures and failing classes from the whole class x value matrix (the oracle)."""
    dense = np.zeros((n_classes, n_values))
    np.add.at(dense, (cid, vid), cnt)
    ok = model.satisfied(dense)
    out = {"failing": int((~ok).sum()),
           "first_failing": dense[np.flatnonzero(~ok)[0]] if not ok.all() else None,
           "min_entropy": float(pm.entropy(dense).min()),
           "min_distinct": int(pm.distinct_values(dense).min())}
    if model.t is not None:
        out["max_emd"] = float(model.emd(dense).max())
    return out


@st.composite
def tables_and_models(draw):
    """A class x value table as pairs in any order (classes without a pair: all NULL), and the
    models asked of it: one l-diversity kind, t-closeness ordered or not, or both."""
    n_values = draw(st.integers(1, 7))
    n_classes = draw(st.integers(1, 12))
    rows = []
    for k in range(n_classes):
        values = draw(st.sets(st.integers(0, n_values - 1), max_size=n_values))
        rows += [(k, v, draw(st.integers(1, 9))) for v in sorted(values)]
    if not rows:
        rows = [(draw(st.integers(0, n_classes - 1)), draw(st.integers(0, n_values - 1)), 1)]
    rows = draw(st.permutations(rows))
    cid, vid, cnt = (np.array(column, dtype=np.int64) for column in zip(*rows))
    table = np.bincount(vid, weights=cnt.astype(np.float64), minlength=n_values)
    kind = draw(st.sampled_from(["distinct", "entropy", "recursive", None]))
    l = c = None
    if kind == "distinct":
        l = draw(st.integers(2, 4))
    elif kind == "entropy":
        l = draw(st.sampled_from([1.5, 2.0, 2.5, 3.0]))
    elif kind == "recursive":
        l, c = draw(st.integers(2, 4)), draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    t = draw(st.sampled_from([None, 0.05, 0.2, 0.5])) if kind else draw(
        st.sampled_from([0.05, 0.2, 0.5]))
    model = pm.Models(l=l, l_diversity=kind or "distinct", c=c, t=t,
                      table=table / table.sum(), ordered=draw(st.booleans()))
    return model, cid, vid, cnt, n_classes, n_values


@settings(max_examples=400, deadline=None)
@given(tables_and_models(), st.sampled_from([1, 2, 7, 1 << 16]), st.integers(1, 3))
def test_the_check_from_the_pairs_decides_and_figures_as_the_dense_matrix(case, step, parts):
    """Every model kind, ordered or not, classes without a value, pairs in any order, ranges of
    any number of pairs and the classes given in several adds: the failing classes, the first
    one's counts and the figures equal those of the dense matrix."""
    model, cid, vid, cnt, n_classes, n_values = case
    want = dense_check(model, cid, vid, cnt, n_classes, n_values)
    check = pm.ClassCheck(model, n_values, step)
    bounds = np.linspace(0, n_classes, parts + 1).astype(int)
    for lo, hi in itertools.pairwise(bounds):
        held = (cid >= lo) & (cid < hi)
        check.add(cid[held] - lo, vid[held], cnt[held], int(hi - lo))
    assert check.failing == want["failing"]
    if want["first_failing"] is None:
        assert check.first_failing is None
    else:
        np.testing.assert_array_equal(check.first_failing, want["first_failing"])
    got = check.figures()
    assert got["min_distinct"] == want["min_distinct"]
    assert got["min_entropy"] == pytest.approx(round(want["min_entropy"], 6), abs=1e-6)
    if model.t is not None:
        assert got["max_emd"] == pytest.approx(round(want["max_emd"], 6), abs=1e-6)
    assert check.failures("s") == (
        [] if not want["failing"] else
        [f"{want['failing']} class(es) fail the privacy model asked: "
         + "; ".join(model.failures(want["first_failing"], '"s" in a class'))])


def test_a_cancel_pending_stops_the_check_between_ranges_of_classes():
    """A release with one distinct value per row: a cancel raised by the installed check stops
    the model check before it goes through all its ranges."""
    rows, cancel = 10_000, CountingCheck(raise_at=3)
    model = pm.Models(t=0.2, table=np.full(rows, 1.0 / rows), ordered=True)
    check = pm.ClassCheck(model, rows, 100)
    with interrupts.checking(cancel), pytest.raises(Interrupted):
        check.add(np.arange(rows) // 5, np.arange(rows), np.ones(rows), rows // 5)
    assert cancel.calls == 3
