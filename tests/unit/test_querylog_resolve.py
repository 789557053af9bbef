"""Column attribution and predicate constants, data-driven from tests/fixtures/querylog/*.sql."""

from pathlib import Path

import pytest
import sqlglot

from plpy_anon.core.workload import AllOf, AnyOf, Condition
from plpy_anon.querylog.resolve import (
    ColumnRef,
    NotAQuery,
    ResolveError,
    constant_value,
    resolve_statement,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "querylog"
CATALOG = {
    "public": {
        "patients": {"id": "integer", "age": "integer", "sex": "text", "zip": "integer",
                     "birth_date": "date", "diagnosis": "text"},
        "visits": {"pid": "integer", "age": "integer", "ts": "date", "cost": "numeric"},
    },
    "clinic": {"staff": {"id": "integer", "name": "text", "age": "integer"}},
}


def load_pairs(name):
    """``(statement, expected)`` pairs: entries end with a line ending in ';'."""
    entries, current = [], []
    for line in (FIXTURES / name).read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current.append(line)
        if line.rstrip().endswith(";"):
            entries.append("\n".join(current).rstrip()[:-1].strip())
            current = []
    assert not current and len(entries) % 2 == 0, f"{name}: unpaired entry"
    return list(zip(entries[0::2], entries[1::2]))


def ref_of(name):
    parts = name.split(".")
    if len(parts) == 1:
        parts = ["patients", *parts]
    if len(parts) == 2:
        parts = ["public", *parts]
    return ColumnRef(*parts)


def resolve(sql):
    return resolve_statement(sqlglot.parse_one(sql, dialect="postgres"), CATALOG)


def parse_use(item):
    column, clause = item.split("@")
    return ref_of(column), clause


@pytest.mark.parametrize("sql, expected", load_pairs("resolve.sql"))
def test_column_uses_match_fixture(sql, expected):
    wanted = {parse_use(item.strip()) for item in expected.split(",") if item.strip()}
    got = {(use.ref, use.clause) for use in resolve(sql).uses}
    assert got == wanted


def parse_constant(item):
    column, op, values = item.split(" ", 2)
    return ref_of(column), op, tuple(_typed(v) for v in values.split("|"))


def _typed(text):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


@pytest.mark.parametrize("sql, expected", load_pairs("predicates.sql"))
def test_predicate_constants_match_fixture(sql, expected):
    wanted = [parse_constant(item.strip()) for item in expected.split(",") if item.strip()]
    got = [(c.column, c.op, c.values) for c in resolve(sql).conditions]
    assert sorted(got, key=repr) == sorted(wanted, key=repr)


def test_where_tree_keeps_and_or_structure():
    tree = resolve("SELECT 1 FROM patients WHERE age > 5 AND (sex = 'F' OR zip = 1)").where
    age, sex, zip_ = ref_of("age"), ref_of("sex"), ref_of("zip")
    assert tree == AllOf((
        Condition(age, ">", (5,)),
        AnyOf((Condition(sex, "=", ("F",)), Condition(zip_, "=", (1,)))),
    ))


def test_or_with_an_unbounded_branch_bounds_nothing():
    # age > $1 has no constant, so the OR as a whole cannot restrict the answer
    tree = resolve("SELECT 1 FROM patients WHERE sex = 'F' AND (zip = 1 OR age > $1)").where
    assert tree == Condition(ref_of("sex"), "=", ("F",))


def test_cte_and_root_filters_are_conjoined():
    tree = resolve(
        "WITH o AS (SELECT * FROM patients WHERE age > 65) SELECT sex FROM o WHERE zip = 7"
    ).where
    assert set(tree.parts) == {
        Condition(ref_of("age"), ">", (65,)), Condition(ref_of("zip"), "=", (7,))
    }


def test_tables_read_are_reported_with_their_schema():
    got = resolve("SELECT s.name FROM clinic.staff s JOIN patients p ON p.id = s.id").tables
    assert got == {("clinic", "staff"), ("public", "patients")}


def test_unknown_column_is_a_resolve_error():
    with pytest.raises(ResolveError):
        resolve("SELECT nosuch FROM patients")


def test_dml_is_not_a_query():
    with pytest.raises(NotAQuery):
        resolve("UPDATE patients SET age = 1 WHERE id = 2")


@pytest.mark.parametrize(
    "literal, value",
    [("42", 42), ("-3.5", -3.5), ("'F'", "F"), ("$1", None), ("age", None), ("'7'::int", "7")],
)
def test_constant_value(literal, value):
    node = sqlglot.parse_one(f"SELECT {literal}", dialect="postgres").selects[0]
    assert constant_value(node) == value
