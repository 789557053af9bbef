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
