"""Adversarial: a release asked for l-diversity and t-closeness whose sensitive column holds a
distinct value on every row (an id, an exact salary). If the check of the models built a dense
class x value matrix a range of classes at a time, its work would grow with classes times
distinct values (an ordered t over classes of 5: ~2 s CPU at 20k rows, ~11 s at 50k) with no
interrupt checked, deaf to statement_timeout and pg_cancel_backend. Property: the release of 60k
such rows ends, built or canceled by a 3 s statement_timeout, within 5 s."""
from __future__ import annotations

import time

import psycopg
import pytest

from tests.helpers import release_schema_of

ROWS = 60_000
TIMEOUT_S = 3
MARGIN_S = 2


@pytest.mark.parametrize("models", ["l => 2, t => 0.9", "l => 2, l_diversity => 'entropy'"])
def test_a_model_check_of_a_distinct_sensitive_value_per_row_ends_within_its_statement_timeout(
        db, schema, models):
    db.execute(f"""CREATE TABLE salaries AS
        SELECT g AS id, (g * 7919) % 100003 AS a, (g * 31) % 997 AS b, g * 3 + 100000 AS salary
        FROM generate_series(1, {ROWS}) g""")
    db.execute(f"SET statement_timeout = '{TIMEOUT_S}s'")
    started = time.monotonic()
    try:
        db.execute(f"SELECT anon.mondrian_view('salaries', 5, quasi_identifiers => '{{a,b}}', "
                   f"sensitive => '{{salary}}', {models}, release_schema => %s)",
                   (release_schema_of(schema),))
    except psycopg.errors.QueryCanceled:
        pass
    finally:
        took = time.monotonic() - started
        db.execute("RESET statement_timeout")
    assert took < TIMEOUT_S + MARGIN_S, f"the statement ran {took:.1f} s"
