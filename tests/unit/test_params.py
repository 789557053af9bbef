"""The one k / l check every release method uses (plpy_anon.db.params)."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.db import params


@given(st.integers(min_value=-10**6, max_value=10**6))
def test_k_is_an_integer_of_two_or_more(k):
    if k >= 2:
        assert params.check_k(k) == k
    else:
        with pytest.raises(InvalidParameter, match=f"k must be at least 2, got {k}") as info:
            params.check_k(k)
        assert info.value.sqlstate == "22023" and "k => 2" in info.value.hint


@pytest.mark.parametrize("k", [2.5, "5", True])
def test_k_refuses_what_is_not_an_integer(k):
    with pytest.raises(InvalidParameter, match="k must be an integer"):
        params.check_k(k)


def test_k_null_is_refused_unless_the_method_has_a_default():
    with pytest.raises(InvalidParameter, match="k must not be NULL"):
        params.check_k(None)
    assert params.check_k(None, optional=True) is None
    with pytest.raises(InvalidParameter, match="k must be at least 2, got 1"):
        params.check_k(1, optional=True)


@given(st.integers(min_value=1, max_value=50), st.integers(min_value=0, max_value=50))
def test_k_at_most_the_rows_read(k, n):
    if n >= k:
        params.check_k_rows(k, n, "s.t")
    else:
        with pytest.raises(InsufficientData, match=f"has {n} rows, fewer than k = {k}"):
            params.check_k_rows(k, n, "s.t")


@given(st.one_of(st.none(), st.integers(min_value=-100, max_value=100)))
def test_l_is_null_or_at_least_one(l):
    if l is None or l >= 1:
        assert params.check_l(l) == l
    else:
        with pytest.raises(InvalidParameter, match=f"l must be at least 1, got {l}"):
            params.check_l(l)


def test_validate_checks_declared_names_only():
    out = params.validate({"k": params.K, "l": params.L}, {"k": 3, "l": None, "other": "x"})
    assert out == {"k": 3, "l": None, "other": "x"}
    with pytest.raises(InvalidParameter, match="l must be at least 1"):
        params.validate({"l": params.L}, {"l": 0})


def test_model_parameters_default_when_missing_and_refuse_with_a_hint():
    # a release made before the models existed has none of these keys: its old behaviour
    out = params.validate(params.MODELS, {"l_diversity": None, "c": None, "t": None,
                                          "split": None})
    assert out == {"l_diversity": "distinct", "c": None, "t": None, "split": "median"}
    for name, value, match in (("l_diversity", "shannon", "must be one of distinct"),
                               ("split", "best", "must be one of median, utility"),
                               ("c", 0, "c must be greater than 0"),
                               ("t", 0, "t must be greater than 0"),
                               ("t", 1.01, "t must be at most 1")):
        with pytest.raises(InvalidParameter, match=match) as info:
            params.validate(params.MODELS, {name: value})
        assert info.value.sqlstate == "22023" and f"{name} =>" in info.value.hint
    assert params.validate(params.MODELS, {"t": 1, "c": 0.5}) == {"t": 1, "c": 0.5}
    with pytest.raises(InvalidParameter, match="c applies to recursive"):
        params.check_models({"l": 2, "l_diversity": "distinct", "c": 2, "t": None})
