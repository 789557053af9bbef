"""NULL arguments and odd values, for every user-facing function of schema anon.

The functions are enumerated from pg_proc (not a hand list), so a function added later is covered
too. Each is called with NULL in each argument position, the others given plausible values; every
call runs in a transaction that is rolled back. A NULL for an argument without a default must be
refused with SQLSTATE 22023 and a message naming the argument; a NULL anywhere must never surface
a Python traceback, a PL/Python label or a raw constraint violation.
"""
from __future__ import annotations

import re

import psycopg
import pytest
from psycopg import sql

from tests.helpers import release_schema_of

# Arguments without a default whose NULL has a documented meaning (nullable= in sql/functions/).
NULLABLE = {("set_column_role", "role")}

# What a rejected call may report: data exceptions (class 22), unknown objects, unmet
# prerequisites, unsupported features. Never 38000 (an unexpected Python exception), XX000, 23xxx.
ALLOWED = re.compile(r"^(22...|42P01|42704|42703|42804|42883|42710|42P07|0A000|55000|P0002)$")
LEAKS = ("Traceback", "IndexError", "KeyError", "TypeError", "AttributeError", "plpy.",
         "spiexceptions", "list index out of range", "NoneType")

SETUP = """
CREATE TABLE people (id int PRIMARY KEY, age int, sex text, zip text, diagnosis text);
INSERT INTO people
SELECT i, 20 + (i * 37) % 50, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + i % 4)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, 60) i;
SELECT anon.set_column_role('people', 'diagnosis', 'sensitive');
"""


def functions(db) -> list[dict]:
    rows = db.execute("""
        SELECT p.oid::regprocedure::text, p.proname::text, a.n, a.name,
               pg_catalog.format_type(p.proargtypes[a.n - 1], NULL),
               pg_catalog.pg_get_function_arg_default(p.oid, a.ord::int)
        FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace AND ns.nspname = 'anon'
        CROSS JOIN LATERAL (
            SELECT row_number() OVER (ORDER BY o) AS n, o AS ord, p.proargnames[o] AS name
            FROM generate_series(1, coalesce(cardinality(p.proargmodes), p.pronargs)) o
            WHERE coalesce(p.proargmodes[o], 'i') IN ('i', 'b', 'v')) a
        WHERE p.prokind = 'f' AND p.proname NOT LIKE '\\_%'
        ORDER BY 1, 3""").fetchall()
    by_function: dict[str, dict] = {}
    for signature, name, _n, arg, typ, default in rows:
        f = by_function.setdefault(signature, {"signature": signature, "name": name, "args": []})
        f["args"].append({"name": arg, "type": typ, "default": default})
    return list(by_function.values())


def plausible(function: str, arg: str, typ: str, ctx: dict):
    """A value that makes sense for the argument (the call may still fail for other reasons)."""
    by_name = {
        "source": ctx["table"], "auxiliary": ctx["table"], "derive_from": ctx["table"],
        "release": ctx["release"], "column_name": "zip", "k": 3, "l": 2,
        "paths": [["53700", "*"], ["53701", "*"], ["53702", "*"], ["53703", "*"]],
        "csv": "53700;*\n53701;*\n53702;*\n53703;*", "queries": ["SELECT age FROM people"],
        "requester": "h1_requester", "by": "h1_recommender", "rating": 0.5,
        "outcome": "success", "purpose": "research", "schedule": "0 3 * * *",
        "identifier": "id", "columns": ["age"], "priorities": "none" if typ == "text" else '{"age": 1}',
        "log_file": "postmaster.opts",                # a file of the data directory, no log
    }
    if function == "set_column_role" and arg == "role":
        return "quasi_identifier"
    if function in ("grant_analyst", "revoke_analyst", "add_requester") and arg == "role":
        return ctx["role"]
    if function in ("fusion_scan", "fusion_resilient_view") and arg == "sensitive":
        return "age"                                  # the fusion attack estimates a number
    if function == "sweep" and arg == "k":
        return [3, 5]                                 # the k to try
    if arg in by_name:
        return by_name[arg]
    return {"integer": 3, "bigint": 3, "double precision": 0.5, "boolean": False, "text": "x",
            "text[]": ["x"], "jsonb": "{}", "name": ctx["role"]}.get(typ, None)


@pytest.fixture
def ctx(db, schema, connect):
    db.execute(SETUP)
    release = db.execute("SELECT anon.mondrian_view('people', k => 3, release_schema => %s)",
                         (release_schema_of(schema),)).fetchone()[0]
    with connect() as admin:
        admin.execute("DROP ROLE IF EXISTS h1_null_role")
        admin.execute("CREATE ROLE h1_null_role")
    yield {"table": f"{schema}.people", "release": release, "role": "h1_null_role"}
    with connect() as admin:
        admin.execute("DROP OWNED BY h1_null_role")
        admin.execute("DROP ROLE h1_null_role")


def call(db, f: dict, null_at: int, ctx: dict):
    """SELECT anon.f(required args..., <arg null_at> => NULL) in a rolled-back transaction:
    None on success, else the error."""
    parts, params = [], []
    for i, arg in enumerate(f["args"]):
        if i != null_at and arg["default"] is not None:
            continue                                 # left out: its default applies
        value = None if i == null_at else plausible(f["name"], arg["name"], arg["type"], ctx)
        parts.append(sql.SQL("{} => {}::{}").format(sql.Identifier(arg["name"]), sql.Placeholder(),
                                                   sql.SQL(arg["type"])))
        params.append(value)
    query = sql.SQL("SELECT * FROM anon.{}({})").format(sql.Identifier(f["name"]),
                                                        sql.SQL(", ").join(parts))
    try:
        with db.transaction(force_rollback=True):
            db.execute("SET LOCAL statement_timeout = '60s'")
            db.execute(query, params).fetchall()
    except psycopg.Error as exc:
        return exc
    return None


def test_every_function_refuses_or_handles_null_in_every_argument(db, ctx):
    problems, refused = [], 0
    listed = functions(db)
    assert len(listed) >= 30 and any(f["name"] == "mondrian_view" for f in listed)
    for f in listed:
        for i, arg in enumerate(f["args"]):
            error = call(db, f, i, ctx)
            where = f"{f['signature']} with {arg['name']} => NULL"
            required = arg["default"] is None and (f["name"], arg["name"]) not in NULLABLE
            if error is None:
                if required:
                    problems.append(f"{where}: accepted")
                continue
            diag = error.diag
            text = f"{diag.message_primary}\n{diag.message_detail or ''}"
            if any(leak in text for leak in LEAKS):
                problems.append(f"{where}: leaks Python internals: {text!r}")
            elif not ALLOWED.match(diag.sqlstate or ""):
                problems.append(f"{where}: SQLSTATE {diag.sqlstate}: {diag.message_primary}")
            elif required:
                refused += 1
                if diag.sqlstate != "22023" or f"argument {arg['name']} must not be NULL" not in \
                        diag.message_primary or f"anon.{f['name']}" not in diag.message_primary:
                    problems.append(f"{where}: {diag.sqlstate} {diag.message_primary!r} "
                                    "does not name the argument")
    assert problems == [], "\n".join(problems)
    assert refused >= 40                             # the required arguments really were tested


def test_null_means_the_default_for_arguments_with_one(db, ctx, schema):
    """release_schema => NULL means 'release'; replace => NULL means false."""
    name = db.execute("SELECT anon.mondrian_view('people', k => 3, release_name => 'h1_nulls', "
                      "release_schema => NULL, replace => NULL)").fetchone()[0]
    try:
        assert name == "release.h1_nulls"
        assert db.execute("SELECT release_schema, release_name FROM anon.releases "
                          "WHERE release_name = 'h1_nulls'").fetchone() == ("release", "h1_nulls")
        sizes = [r[0] for r in db.execute("SELECT count(*) FROM release.h1_nulls GROUP BY age, sex, zip")]
        assert sum(sizes) == 60 and min(sizes) >= 3
        with pytest.raises(psycopg.errors.DuplicateObject):    # replace => NULL is false
            db.execute("SELECT anon.mondrian_view('people', k => 3, release_name => 'h1_nulls', "
                       "replace => NULL)")
    finally:
        db.execute("SELECT anon.drop_release('release.h1_nulls', if_exists => true)")


@pytest.mark.parametrize("frequencies", [[1, 0], [-3, 2]])
def test_add_queries_refuses_non_positive_frequencies(db, frequencies):
    before = db.execute("SELECT count(*) FROM anon.workload").fetchone()[0]
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        db.execute("SELECT anon.add_queries(ARRAY['SELECT 1', 'SELECT 2'], %s::bigint[])",
                   (frequencies,))
    assert "argument frequencies" in info.value.diag.message_primary
    assert str(min(frequencies)) in info.value.diag.message_primary
    assert db.execute("SELECT count(*) FROM anon.workload").fetchone()[0] == before


# ---------------------------------------------------------------------------- odd hierarchy values

JOBS = """
CREATE TABLE jobs (id int PRIMARY KEY, age int, job text);
INSERT INTO jobs SELECT i, 20 + i % 30, (ARRAY[' a ', 'a', '', 'b '])[1 + i % 4]
FROM generate_series(1, 80) i;
"""
ARRAY_PATHS = [[" a ", "A", "*"], ["a", "A", "*"], ["", "B", "*"], ["b ", "B", "*"]]
CSV_PATHS = '" a ";A;*\na ; A ;*\n"";B;*\n"b " ;B;*;;\n\n'


@pytest.mark.parametrize("how", ["array", "csv"])
def test_hierarchy_labels_with_spaces_and_empty_strings(db, schema, how):
    db.execute(JOBS)
    if how == "array":
        n = db.execute("SELECT anon.set_hierarchy('jobs', 'job', %s::text[])", (ARRAY_PATHS,)).fetchone()[0]
    else:
        n = db.execute("SELECT anon.set_hierarchy_csv('jobs', 'job', %s)", (CSV_PATHS,)).fetchone()[0]
    assert n == 4
    stored = db.execute("SELECT leaf, path FROM anon.hierarchies WHERE source = 'jobs'::regclass "
                        "ORDER BY leaf").fetchall()
    assert stored == [("", ["", "B", "*"]), (" a ", [" a ", "A", "*"]), ("a", ["a", "A", "*"]),
                      ("b ", ["b ", "B", "*"])]
    release = db.execute("SELECT anon.mondrian_view('jobs', k => 5, release_schema => %s)",
                         (release_schema_of(schema),)).fetchone()[0]
    # From the released rows: k-anonymous, every job a hierarchy label, no row invented, and the
    # odd leaves themselves are released where a class holds only them.
    sizes = [r[0] for r in db.execute(f"SELECT count(*) FROM {release} GROUP BY age, job")]
    assert sum(sizes) == 80 and min(sizes) >= 5
    labels = {r[0] for r in db.execute("SELECT DISTINCT unnest(path) FROM anon.hierarchies "
                                       "WHERE source = 'jobs'::regclass")}
    released = dict(db.execute(f"SELECT job, count(*) FROM {release} GROUP BY job").fetchall())
    assert set(released) <= labels
    assert {" a ", ""} <= set(released)
    for leaf, count in released.items():
        if leaf not in ("A", "B", "*"):
            assert count <= db.execute("SELECT count(*) FROM jobs WHERE job = %s", (leaf,)).fetchone()[0]


@pytest.mark.parametrize("csv, message", [
    ('" a ;A;*\n', "unterminated quoted cell"),
    ('" a "x;A;*\n', "text after a quoted cell"),
])
def test_hierarchy_csv_quoting_errors(db, schema, csv, message):
    db.execute(JOBS)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message) as info:
        db.execute("SELECT anon.set_hierarchy_csv('jobs', 'job', %s)", (csv,))
    assert "line 1" in info.value.diag.message_primary
    assert db.execute("SELECT count(*) FROM anon.hierarchies WHERE source = 'jobs'::regclass").fetchone()[0] == 0
