"""plpy-anon keeps PostgreSQL's manners: psql's connection options and libpq's defaults, an exit
status per kind of failure, numbers and timestamps as exact as the server sent them."""
from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from plpy_anon import cli
from plpy_anon.client import AnonClient
from tests.helpers import release_schema_of

NO_CONNECTION = {v: None for v in ("PLPY_ANON_DSN", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE",
                                    "PGUSER", "PGSERVICE", "PGOPTIONS")}


def invoke(*args, env=None, **kwargs):
    return CliRunner().invoke(cli.main, list(args), env={**NO_CONNECTION, **(env or {})}, **kwargs)


# each way of naming the server psql takes; every row must reach the test database
@pytest.mark.parametrize("style", ["options", "conninfo", "uri", "variables", "options over variables"])
def test_the_connection_is_named_the_ways_psql_takes_it(pg_server, style):
    host, port, user, db = (str(pg_server[k]) for k in ("host", "port", "user", "dbname"))
    args, env = {
        "options": (["-h", host, "-p", port, "-U", user, "-d", db], {}),
        "conninfo": (["-d", f"host={host} port={port} user={user} dbname={db}"], {}),
        "uri": (["--dbname", f"postgresql://{user}@/{db}?host={host}&port={port}"], {}),
        "variables": ([], {"PGHOST": host, "PGPORT": port, "PGUSER": user, "PGDATABASE": db}),
        "options over variables": (["-d", db, "-p", port],
                                   {"PGHOST": host, "PGPORT": "1", "PGUSER": user, "PGDATABASE": "nope"}),
    }[style]
    result = invoke(*args, "--version", env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].endswith(f" in database {db}"), result.stdout
    status = invoke(*args, "--quiet", "release-status", env=env)
    assert status.exit_code == 0, status.output


def test_minus_w_asks_for_the_password_before_connecting(pg_server):
    host, port, user, db = (str(pg_server[k]) for k in ("host", "port", "user", "dbname"))
    result = invoke("-h", host, "-p", port, "-U", user, "-d", db, "-W", "--quiet", "release-status",
                    input="not-needed\n")
    assert result.exit_code == 0, result.output          # the test server trusts local sockets
    assert "Password" in result.stderr


@pytest.fixture
def cli_in(pg_server, db, schema):
    db.execute("""
        CREATE TABLE patients (id int PRIMARY KEY, name text, age int, sex text, zip text, diagnosis text);
        INSERT INTO patients SELECT i, 'name ' || i, 20 + (i * 37) % 60, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
               (53700 + (i * 13) % 6)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
        FROM generate_series(1, 90) i""")
    conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"

    def run(*args):
        return invoke("-d", conninfo, *args)
    return run


def test_each_kind_of_failure_has_its_exit_status(cli_in, schema, monkeypatch):
    release_schema = release_schema_of(schema)
    statuses = {
        "usage": (["release-status", "--no-such-option"], cli.EXIT_USAGE),
        "refused by the server": (["--quiet", "mondrian-view", "patients", "--k", "1",
                                   "--release-schema", release_schema], cli.EXIT_ERROR),
        "not found": (["--quiet", "refresh", "no_such_release"], cli.EXIT_NOT_FOUND),
        "no such table": (["--quiet", "column-roles", "no_such_table"], cli.EXIT_NOT_FOUND),
        # "name" looks identifying and is not declared: the release is refused (42P10)
        "undeclared identifier": (["--quiet", "mondrian-view", "patients", "--k", "5",
                                   "--release-schema", release_schema], cli.EXIT_REFUSED),
        "more k than rows": (["--quiet", "mondrian-view", "patients", "--k", "500", "--identifiers", "name,id",
                              "--release-schema", release_schema], cli.EXIT_REFUSED),
    }
    for kind, (args, status) in statuses.items():
        result = cli_in(*args)
        assert result.exit_code == status, (kind, result.output)
        assert "Traceback" not in result.output, kind
    unreachable = invoke("-h", "/nonexistent_plpy_anon", "-d", "x", "release-status")
    assert unreachable.exit_code == cli.EXIT_CONNECTION
    assert unreachable.stderr.startswith("plpy-anon: error: connection to server on socket")

    def broken(self, *args, **kwargs):
        raise RuntimeError("a bug")
    monkeypatch.setattr(AnonClient, "rows", broken)          # what release-status calls
    internal = cli_in("release-status")
    assert internal.exit_code == cli.EXIT_INTERNAL
    assert "RuntimeError: a bug" in internal.stderr and "please report it" in internal.stderr
    assert sorted(cli.EXIT_CODES) == [0, 1, 2, 3, 4, 5, 70, 73]


def test_numbers_and_timestamps_are_exact_in_json_and_csv(cli_in, db, schema):
    release_schema = release_schema_of(schema)
    created = cli_in("--quiet", "--format", "json", "mondrian-view", "patients", "--k", "5",
                     "--identifiers", "name,id", "--release-schema", release_schema)
    assert created.exit_code == 0, created.output
    release = json.loads(created.stdout)[0]["release"]
    db.execute("CREATE TABLE other (id int, name text, age int, sex text, zip text, diagnosis text)")
    status = json.loads(cli_in("--format", "json", "release-status").stdout)
    mine = next(r for r in status if r["release"] == release)
    assert mine["achieved_k"] >= 5 and isinstance(mine["achieved_k"], int)        # not 10.0
    assert isinstance(mine["row_count"], int) and mine["row_count"] == 90
    assert "T" in mine["refreshed_at"]                                              # ISO 8601
    table = cli_in("release-status").stdout
    assert mine["refreshed_at"].replace("T", " ")[:19] in table                    # as psql shows it

    # a value of every kind through risk-report's own numbers is not enough: render them directly
    frame = __import__("pandas").DataFrame({
        "big": [__import__("decimal").Decimal("12345678901234567890.123")], "f": [1.7193e11],
        "tiny": [1e-7], "yes": [True], "n": [None]})
    rows = list(csv.reader(io.StringIO(cli.render_csv(frame))))
    assert rows[1] == ["12345678901234567890.123", "171930000000", "1e-07", "t", ""]
    assert json.loads(cli.render_json(frame))[0] == {
        "big": "12345678901234567890.123", "f": 171930000000, "tiny": 1e-07, "yes": True, "n": None}
    assert "1.7193e+11" not in cli.render_table(frame) and "171930000000 " in cli.render_table(frame)


def test_column_roles_and_detect_identifiers_commands(cli_in):
    roles = cli_in("--format", "json", "column-roles", "patients")
    assert roles.exit_code == 0, roles.output
    by_name = {r["column_name"]: r["role"] for r in json.loads(roles.stdout)}
    assert set(by_name) == {"id", "name", "age", "sex", "zip", "diagnosis"}
    found = cli_in("--format", "json", "detect-identifiers", "patients", "--sample-size", "50")
    assert found.exit_code == 0, found.output
    flagged = {r["column_name"]: r for r in json.loads(found.stdout)}
    assert "name" in flagged and flagged["name"]["blocks_release"] is True


def test_the_client_takes_a_function_named_with_its_schema(pg_server):
    with AnonClient(" ".join(f"{k}={v}" for k, v in pg_server.items())) as anon:
        assert list(anon.frame("anon.versions").columns) == list(anon.frame("versions").columns)
