"""anon.mdav_view against a real PostgreSQL: what its released rows show, checked in SQL from the
rows alone (the lifecycle, k's refusals and grants are the contract's: tests/contract)."""
from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tests.helpers import class_sizes

TABLE = 'Odd "T" x'
AGE, SCORE = 'Age "x"', "score y"


def make_table(db, rows) -> None:
    db.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (id int, {} int, {} float8, salary int)"
                       ).format(sql.Identifier(TABLE), sql.Identifier(AGE), sql.Identifier(SCORE)))
    db.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(TABLE)))
    with db.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(TABLE))) as copy:
        for row in rows:
            copy.write_row(row)


def release(db, k, **options) -> str:
    args = {"quasi_identifiers": [AGE, SCORE], "sensitive": ["salary"], "identifiers": ["id"],
            "replace": True, **options}
    named = sql.SQL(", ").join(sql.SQL("{} => {}").format(sql.Identifier(n), sql.Literal(v))
                               for n, v in args.items())
    return db.execute(sql.SQL("SELECT anon.mdav_view({}::regclass, k => {}, {})").format(
        sql.Literal(sql.Identifier(TABLE).as_string(db)), sql.Literal(k), named)).fetchone()[0]


def classes_not_covered(db, relation: str) -> int:
    """Released classes holding more rows than the source has inside their ranges (a NULL value
    may sit in any class, as in every range-publishing release; a class of NULLs is NULL)."""
    inside = sql.SQL(" AND ").join(
        sql.SQL("(CASE WHEN r.{c} IS NULL THEN s.{c} IS NULL ELSE s.{c} IS NULL "
                "OR s.{c}::{t} <@ r.{c} END)").format(c=sql.Identifier(c), t=sql.SQL(t))
        # float8's text is its exact shortest form; float8::numeric rounds to 15 digits
        for c, t in ((AGE, "int4"), (SCORE, "text::numeric")))
    qis = sql.SQL(", ").join(sql.Identifier(c) for c in (AGE, SCORE))
    return db.execute(sql.SQL(
        "SELECT count(*) FROM (SELECT {qis}, count(*) AS n FROM {rel} GROUP BY {qis}) r "
        "WHERE n > (SELECT count(*) FROM {src} s WHERE {inside})").format(
        qis=qis, rel=sql.SQL(relation), src=sql.Identifier(TABLE), inside=inside)).fetchone()[0]


def released_rows(db, relation: str) -> int:
    return db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(relation))).fetchone()[0]


def test_nulls_and_odd_names_release_k_anonymous_truthful_classes(db, schema):
    rows = [(i, None if i % 7 == 0 else 20 + i % 30, None if i % 5 == 0 else (i * 13) % 17, i)
            for i in range(1, 61)]
    make_table(db, rows)
    relation = release(db, 3)
    assert relation.endswith('."Odd ""T"" x_mdav_k3"')
    sizes = class_sizes(db, relation, [AGE, SCORE])
    assert min(sizes) >= 3 and sum(sizes) == 60
    assert classes_not_covered(db, relation) == 0
    # the NULLs of a column group together first: a class of NULLs publishes NULL
    assert db.execute(sql.SQL("SELECT count(*) FROM {} WHERE {} IS NULL").format(
        sql.SQL(relation), sql.Identifier(SCORE))).fetchone()[0] >= 3
    # identifiers are dropped, the sensitive column released as it is
    columns = [r[0] for r in db.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "ORDER BY attnum", (relation,)).fetchall()]
    assert columns == [AGE, SCORE, "salary"]
    assert db.execute(sql.SQL("SELECT sum(salary) FROM {}").format(sql.SQL(relation))
                      ).fetchone()[0] == sum(range(1, 61))


def test_a_text_quasi_identifier_is_refused_42804(db, schema):
    db.execute("CREATE TABLE people (id int, age int, job text)")
    db.execute("INSERT INTO people SELECT i, i, 'x' || i % 3 FROM generate_series(1, 20) i")
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT anon.mdav_view('people', k => 2, "
                   "quasi_identifiers => ARRAY['age', 'job'])")
    assert info.value.sqlstate == "42804"
    assert '"job" (text)' in info.value.diag.message_primary
    assert db.execute("SELECT count(*) FROM anon.releases WHERE source = 'people'::regclass"
                      ).fetchone()[0] == 0


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 90)),
                               st.one_of(st.none(), st.floats(-5, 5, allow_nan=False))),
                     min_size=6, max_size=60),
       k=st.integers(2, 5))
def test_every_released_class_holds_k_rows_inside_its_ranges(db, schema, data, k):
    if len(data) < k:
        return
    make_table(db, [(i, age, score, i) for i, (age, score) in enumerate(data)])
    relation = release(db, k, release_name="mdav_property")
    sizes = class_sizes(db, relation, [AGE, SCORE])
    assert min(sizes) >= k
    assert released_rows(db, relation) == len(data)
    assert classes_not_covered(db, relation) == 0
