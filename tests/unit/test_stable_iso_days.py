"""The stable check ranks dates printed as ISO (YYYY-MM-DD) by their day numbers, computed from
their digits (db.republication._iso_days): the same numbers numpy's calendar gives, for any date
of the common era below year 10000; and no numbers at all (SQL ranks them) for a list holding
any other text."""
from __future__ import annotations

import datetime

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from plpy_anon.db.republication import _iso_days

dates = st.lists(st.dates(min_value=datetime.date(1, 1, 1), max_value=datetime.date(9999, 12, 31)),
                 max_size=60)
#: texts PostgreSQL prints for dates in other DateStyles or no ISO text spells, and near misses
OTHERS = ["0044-03-15 BC", "infinity", "-infinity", "10000-01-01", "31/12/1999", "12-31-1999",
          "31.12.1999", "Fri Dec 31 1999", "2000-13-01", "2000-02-30", "1900-02-29", "0000-01-01",
          "2000-1-01", "2000-01-01 ", "", "NaT", "2000-01-0a", "2000-01-01\x00", "é000-01-01"]


@given(dates)
def test_iso_dates_give_numpys_day_numbers(days):
    texts = [d.isoformat() for d in days]
    expected = (np.array(texts, dtype="datetime64[D]") - np.datetime64("2000-01-01", "D")).astype(np.int64)
    assert _iso_days(texts).tolist() == expected.tolist()


@given(dates, st.sampled_from(OTHERS), st.integers(0, 60))
def test_any_other_text_leaves_the_dates_to_sql(days, other, at):
    texts = [d.isoformat() for d in days]
    texts.insert(min(at, len(texts)), other)
    assert _iso_days(texts) is None
