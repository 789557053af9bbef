"""Adversarial (h8): anon.detect_identifiers samples ``FROM ONLY <table>`` (identifiers.py,
sample_columns, both branches). A partitioned table or an inheritance parent holds no rows of its
own, so the sample is EMPTY: only column-name rules fire. E-mail addresses in a column called
``contact`` pass, and Mondrian publishes every address verbatim in the class value sets
(``{user245@example.com, ...}``), verified = true. The same table unpartitioned is refused
(42P10). Fix: sample without ONLY (releases read the whole hierarchy), e.g.
``FROM <table> TABLESAMPLE`` (works for partitioned / inheritance parents) or sampling per leaf.
"""
from __future__ import annotations

import psycopg
import pytest

ROWS = ("SELECT g, 1 + g % 2, 'user' || g || '@example.com', 20 + g % 30 "
        "FROM generate_series(1, 300) g")


def make(db, how):
    if how == "plain":
        db.execute("CREATE TABLE people (id int, region int, contact text, age int)")
    elif how == "partitioned":
        db.execute("CREATE TABLE people (id int, region int, contact text, age int) "
                   "PARTITION BY LIST (region)")
        db.execute("CREATE TABLE people_1 PARTITION OF people FOR VALUES IN (1)")
        db.execute("CREATE TABLE people_2 PARTITION OF people FOR VALUES IN (2)")
    else:
        db.execute("CREATE TABLE people (id int, region int, contact text, age int)")
        db.execute("CREATE TABLE people_child () INHERITS (people)")
    target = "people_child" if how == "inheritance" else "people"
    db.execute(f"INSERT INTO {target} {ROWS}")
    db.execute("SELECT anon.set_column_role('people', 'id', 'identifier')")
    db.execute("SELECT anon.set_column_role('people', 'region', 'ignored')")


@pytest.mark.parametrize("how", ["plain", "partitioned", "inheritance"])
def test_emails_in_a_contact_column_are_detected(db, schema, how):
    make(db, how)
    kinds = {r[0] for r in db.execute(
        "SELECT kind FROM anon.detect_identifiers('people') WHERE column_name = 'contact'")}
    assert "email" in kinds


@pytest.mark.parametrize("how", ["plain", "partitioned", "inheritance"])
def test_release_with_undeclared_emails_is_refused(db, schema, release_schema, how):
    make(db, how)
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT anon.mondrian_view('people', k => 5, release_schema => %s)",
                   (release_schema,))
    assert info.value.sqlstate == "42P10"
