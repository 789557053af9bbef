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


# -- the single-table path: what qualify would have given, and taken where it should be -------
def _both_ways(sql, monkeypatch):
    """(resolution with the single-table path, resolution through qualify, path taken?)."""
    from plpy_anon.querylog import resolve as module

    taken = []
    single = module._qualified_single_table

    def spy(*args):
        result = single(*args)
        taken.append(result is not None)
        return result

    outcomes = []
    for path in (spy, lambda *args: None):
        monkeypatch.setattr(module, "_qualified_single_table", path)
        try:
            outcomes.append(resolve(sql))
        except (ResolveError, NotAQuery) as error:
            outcomes.append(type(error))
    monkeypatch.setattr(module, "_qualified_single_table", single)
    return outcomes[0], outcomes[1], taken == [True]


FIXTURE_STATEMENTS = [sql for name in ("resolve.sql", "predicates.sql") for sql, _ in load_pairs(name)]


@pytest.mark.parametrize("sql", FIXTURE_STATEMENTS)
def test_the_single_table_path_resolves_every_fixture_as_qualify_does(sql, monkeypatch):
    fast, reference, _ = _both_ways(sql, monkeypatch)
    assert fast == reference


SIMPLE = [
    "SELECT age FROM patients WHERE age > 30",
    "SELECT p.age, sex FROM public.patients AS p WHERE p.zip BETWEEN 1000 AND 2000 ORDER BY 1",
    "SELECT sex, count(*) FROM patients WHERE diagnosis LIKE 'fl%' GROUP BY 1 ORDER BY sex DESC",
    "SELECT AGE FROM Patients WHERE Sex IN ('F', 'M') OR -5 < Age LIMIT 10",
    "SELECT extract(year FROM birth_date) FROM patients WHERE birth_date >= '2000-01-01'",
]


@pytest.mark.parametrize("sql", SIMPLE)
def test_simple_statements_take_the_single_table_path_and_resolve_as_qualify_does(sql, monkeypatch):
    fast, reference, taken = _both_ways(sql, monkeypatch)
    assert fast == reference and taken


@pytest.mark.parametrize("sql", [
    "SELECT * FROM patients WHERE age > 3",                        # a star to expand
    "SELECT age FROM patients p JOIN visits v ON v.pid = p.id",    # two tables
    "SELECT age FROM patients WHERE id IN (SELECT pid FROM visits)",
    "SELECT nope FROM patients",                                   # qualify's error
    'SELECT "Age" FROM patients',                                  # quoted: not age
    "SELECT age + 1 FROM patients ORDER BY 1",                     # a position on an expression
    "SELECT sex, count(*) FROM patients GROUP BY sex ORDER BY 2",  # ... on an aggregate
    "SELECT age AS years FROM patients WHERE zip <> 5 ORDER BY years",  # an output alias
    "SELECT \u00c2GE FROM patients",                                   # folds only A-Z: no such column
    'SELECT age FROM "PATIENTS"',                                  # quoted: no such table
    'SELECT age FROM "PUBLIC".patients WHERE age > 3',             # ... no such schema
    "SELECT id FROM patients p(x)",                                # the alias renames id
    "SELECT age, age FROM patients ORDER BY 1",                    # a position on a name twice
    "SELECT age, zip AS age FROM patients ORDER BY 1",             # ... and an output alias
    "SELECT age /* sqlglot.meta case_sensitive */ FROM patients",  # sqlglot's own case rule
])
def test_other_statements_go_through_qualify(sql, monkeypatch):
    fast, reference, taken = _both_ways(sql, monkeypatch)
    assert fast == reference and not taken


@pytest.mark.parametrize("sql", ["SELECT * FROM nosuch GROUP BY 1",
                                 "SELECT * FROM patients JOIN nosuch ON true ORDER BY 1"])
def test_statements_sqlglot_asserts_on_are_unresolved(sql):
    """qualify raises an AssertionError ("* is not Alias") on these: unresolved, not a crash."""
    with pytest.raises(ResolveError):
        resolve(sql)
