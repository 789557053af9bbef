"""Adversarial: a release asked for entropy l-diversity whose sensitive column holds a distinct
value on every row (an id, an exact salary). If the release check of the models built a dense
class x value matrix a range of classes at a time, its work would grow with classes times
distinct values with no interrupt checked, deaf to statement_timeout and pg_cancel_backend (60k
rows: 7.5 s under a 3 s timeout). Property: the release of 60k such rows ends, built or canceled
by a 3 s statement_timeout, within 5 s."""
from __future__ import annotations

import time

import psycopg

from tests.helpers import release_schema_of

ROWS = 60_000
TIMEOUT_S = 3
MARGIN_S = 2


def test_an_entropy_check_of_a_distinct_sensitive_value_per_row_ends_within_its_statement_timeout(
        db, schema):
    db.execute(f"""CREATE TABLE salaries AS
        SELECT g AS id, (g * 7919) % 100003 AS a, (g * 31) % 997 AS b, g * 3 + 100000 AS salary
        FROM generate_series(1, {ROWS}) g""")
    db.execute(f"SET statement_timeout = '{TIMEOUT_S}s'")
    started = time.monotonic()
    try:
        db.execute("SELECT anon.mondrian_view('salaries', 5, quasi_identifiers => '{a,b}', "
                   "sensitive => '{salary}', l => 2, l_diversity => 'entropy', release_schema => %s)",
                   (release_schema_of(schema),))
    except psycopg.errors.QueryCanceled:
        pass
    finally:
        took = time.monotonic() - started
        db.execute("RESET statement_timeout")
    assert took < TIMEOUT_S + MARGIN_S, f"the statement ran {took:.1f} s"
