"""Adversarial: a release whose sensitive column holds a distinct value on every row (an id, an
exact salary). Its risk report (t-closeness by EMD) and, with a model asked, its release check
decide each class from its (class, value, rows) pairs: were either to build a class x value
matrix a range of classes at a time, its work would grow with classes times distinct values
(the risk report: ~15 s of CPU at 100k rows, a million-row release unfinished after 12 minutes;
the entropy check: 7.5 s at 60k), with no interrupt checked, deaf to statement_timeout and
pg_cancel_backend. Property: the release of 60k such rows ends, built or canceled by a 3 s
statement_timeout, within 5 s of its backend's CPU (up to 3 s before the timeout, then under 2 s:
a loaded machine gives it more wall time, not more CPU)."""
from __future__ import annotations

import psycopg
import pytest

from tests.helpers import release_schema_of
from tests.waits import cpu_seconds

ROWS = 60_000
TIMEOUT_S = 3
MARGIN_S = 2


@pytest.mark.parametrize("model", ["", ", l => 2, l_diversity => 'entropy'"],
                         ids=["risk report", "entropy check"])
def test_a_release_of_a_distinct_sensitive_value_per_row_ends_within_its_statement_timeout(
        db, schema, model):
    db.execute(f"""CREATE TABLE salaries AS
        SELECT g AS id, (g * 7919) % 100003 AS a, (g * 31) % 997 AS b, g * 3 + 100000 AS salary
        FROM generate_series(1, {ROWS}) g""")
    db.execute(f"SET statement_timeout = '{TIMEOUT_S}s'")
    started = cpu_seconds(db.info.backend_pid)
    try:
        db.execute("SELECT anon.mondrian_view('salaries', 5, quasi_identifiers => '{a,b}', "
                   f"sensitive => '{{salary}}'{model}, release_schema => %s)",
                   (release_schema_of(schema),))
    except psycopg.errors.QueryCanceled:
        pass
    finally:
        took = cpu_seconds(db.info.backend_pid) - started
        db.execute("RESET statement_timeout")
    assert took < TIMEOUT_S + MARGIN_S, f"the statement used {took:.1f} s of CPU"
