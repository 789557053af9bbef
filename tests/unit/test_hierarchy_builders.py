"""Interval and date hierarchies built from a column's values (core.hierarchy.interval_paths,
date_paths): every label holds its value, each level's label lies inside the next one's, and the
paths form one tree."""
from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from fractions import Fraction
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.core.hierarchy import DATE_UNITS, Hierarchy, date_paths, interval_paths


def bounds(label: str) -> tuple[Decimal, Decimal]:
    low, high = re.fullmatch(r"\[(-?[0-9.]+),(-?[0-9.]+)\)", label).groups()
    return Decimal(low), Decimal(high)


numbers = st.decimals(min_value=-10_000, max_value=10_000, places=2, allow_nan=False)


@given(values=st.lists(numbers, min_size=1, max_size=40, unique=True),
       base=st.sampled_from(["0.5", "1", "2.5", "5", "7"]),
       factors=st.lists(st.integers(2, 4), max_size=3),
       origin=st.decimals(min_value=-50, max_value=50, places=1, allow_nan=False))
def test_every_interval_holds_its_value_and_lies_inside_the_next(values, base, factors, origin):
    widths = [Decimal(base)]
    for factor in factors:
        widths.append(widths[-1] * factor)
    paths = interval_paths([(str(v), v) for v in values], widths, origin)
    assert [Decimal(p[0]) for p in paths] == sorted(values)
    for path in paths:
        value = Decimal(path[0])
        intervals = [bounds(label) for label in path[1:-1]]
        assert path[-1] == "*" and len(intervals) == len(widths)
        for (low, high), width in zip(intervals, widths):
            assert low <= value < high and high - low == width
            assert (low - origin) % width == 0
        for (low, high), (outer_low, outer_high) in pairwise(intervals):
            assert outer_low <= low and high <= outer_high
    Hierarchy.from_paths(paths)       # one tree: no label with two parents


@given(values=st.lists(st.integers(-10 ** 57, 10 ** 57), min_size=1, max_size=20, unique=True),
       exponent=st.integers(30, 40), width=st.integers(1, 9), factor=st.integers(2, 5),
       places=st.integers(0, 3))
def test_intervals_of_numbers_of_many_digits_are_exact(values, exponent, width, factor, places):
    """Bounds of numbers wider than any default decimal precision hold their value exactly."""
    scale = Decimal(10) ** -places
    numbers = [Decimal(v).scaleb(-places) for v in values]
    widths = [Decimal(width) * Decimal(10) ** exponent, Decimal(width * factor) * Decimal(10) ** exponent]
    paths = interval_paths([(str(v), v) for v in numbers], widths, origin=scale)
    for path in paths:
        value = Fraction(Decimal(path[0]))
        for label, step in zip(path[1:-1], widths):    # as fractions: Decimal arithmetic rounds
            low, high = (Fraction(b) for b in bounds(label))
            assert low <= value < high and high - low == Fraction(step)
            assert (low - Fraction(scale)) % Fraction(step) == 0


@pytest.mark.parametrize("values, widths", [
    ([Decimal("1e30"), Decimal(1)], [Decimal("0.001")]), ([18, 77], [Decimal("1e-30")])])
def test_a_width_too_fine_for_the_values_is_refused(values, widths):
    with pytest.raises(InvalidParameter, match="too fine") as error:
        interval_paths([(str(v), v) for v in values], widths)
    assert error.value.hint


@given(days=st.lists(st.integers(0, 60_000), min_size=1, max_size=40, unique=True),
       levels=st.lists(st.sampled_from(list(DATE_UNITS)), min_size=1, unique=True))
def test_every_date_label_is_the_period_holding_its_date(days, levels):
    levels = sorted(levels, key=list(DATE_UNITS).index)
    dates = [dt.date(1900, 1, 1) + dt.timedelta(days=d) for d in days]
    paths = date_paths([(d.isoformat(), d.year, d.month, d.day) for d in dates], levels)
    for path in paths:
        day = dt.date.fromisoformat(path[0])
        for unit, label in zip(levels, path[1:-1]):
            expected = {"day": day.isoformat(), "month": day.isoformat()[:7],
                        "quarter": f"{day.year}-Q{(day.month - 1) // 3 + 1}", "year": str(day.year),
                        "decade": f"{day.year - day.year % 10}s"}[unit]
            assert label == expected
        assert path[-1] == "*"
    Hierarchy.from_paths(paths)


@pytest.mark.parametrize("widths, message", [
    ([], "widths is empty"), ([5, None], "must not be NULL"), ([0], "positive"),
    ([-5], "positive"), ([10, 25], "not a multiple"), ([10, 10], "not a multiple"),
    ([Decimal("Infinity")], "positive"),
])
def test_bad_widths_are_refused(widths, message):
    with pytest.raises(InvalidParameter, match=message):
        interval_paths([("1", 1)], widths)


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")])
def test_a_value_without_an_interval_is_refused(value):
    with pytest.raises(InvalidParameter, match="has no interval"):
        interval_paths([("1", 1), (str(value), value)], [5])


@pytest.mark.parametrize("levels, message", [
    ([], "levels is empty"), (["week"], "unknown date level"), ([None], "unknown date level"),
    (["year", "month"], "not from the finest"), (["month", "month"], "not from the finest"),
])
def test_bad_date_levels_are_refused(levels, message):
    with pytest.raises(InvalidParameter, match=message):
        date_paths([("2024-03-15", 2024, 3, 15)], levels)


def test_an_infinite_date_is_refused():
    with pytest.raises(InvalidParameter, match="has no calendar date"):
        date_paths([("infinity", float("inf"), float("inf"), float("inf"))], ["year"])
