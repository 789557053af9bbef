"""Every command's --format json output holds exact numbers: an integer figure is a JSON integer
(``"rows": 400``, never ``400.0``), whatever type the server sent it in, as PostgreSQL's own
``to_json`` writes a float8 that has no fraction. One invocation per command, each a new session
as from a shell, against one module-wide table, release, requester and role."""
from __future__ import annotations

import itertools
import json

import pytest
from click.testing import CliRunner
from psycopg import sql

from plpy_anon.cli import main
from plpy_anon.parameters import SURFACES
from tests.contract.methods import BY_NAME, NUMERIC_QIS, QIS, create_table
from tests.helpers import release_schema_of

_names = itertools.count()
QI_OPTION = ",".join(QIS)


@pytest.fixture(scope="module")
def world(pg_server, connect, tmp_path_factory):
    """A schema with the contract suite's table (and its auxiliary table), a k = 5 release, one
    release to drop, a requester with a purpose, a role to grant, a query log and a hierarchy."""
    db = connect()
    # as tests/db/test_cron.py: in public, so that no test schema takes pg_cron away with it
    db.execute("CREATE EXTENSION IF NOT EXISTS pg_cron SCHEMA public")
    schema = f"json_numbers_{next(_names)}"
    released_in = release_schema_of(schema)
    db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    db.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
    source = create_table(db, f"{schema}.people")
    release = db.execute("SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => %s, sensitive => '{salary}', "
                         "release_schema => %s)", (source, QIS, released_in)).fetchone()[0]
    doomed = db.execute("SELECT anon.mondrian_view(%s, k => 10, release_name => 'doomed', release_schema => %s)",
                        (source, released_in)).fetchone()[0]
    role = f"json_numbers_role_{next(_names)}"
    requester, purpose = f"json_req_{next(_names)}", f"json_purpose_{next(_names)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db.execute("SELECT anon.add_requester(%s, role => %s)", (requester, role))
    db.execute("SELECT anon.define_purpose(%s, priorities => '{\"age\": 1, \"job\": 0.2}'::jsonb)", (purpose,))
    files = tmp_path_factory.mktemp("json_numbers")
    (files / "postgresql.log").write_text(
        "2026-11-21 10:00:00.000 UTC [7] LOG:  statement: SELECT age FROM people WHERE sex = 'F'\n")
    (files / "sex.csv").write_text("M;*\nF;*\n")
    dsn = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
    yield {"dsn": dsn, "source": source, "release": release, "doomed": doomed, "role": role,
           "requester": requester, "purpose": purpose, "files": files, "schema": released_in}
    for (rel,) in db.execute("SELECT format('%%I.%%I', release_schema, release_name) FROM anon.releases "
                             "WHERE release_schema = %s", (released_in,)).fetchall():
        db.execute("SELECT anon.drop_release(%s, if_exists => true)", (rel,))
    db.execute("DELETE FROM anon.purposes WHERE purpose_name = %s", (purpose,))
    db.execute("DELETE FROM anon.analysts WHERE role_name = %s", (role,))
    db.execute("DELETE FROM anon.requesters WHERE role_name = %s", (role,))
    db.execute(sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(sql.Identifier(role), sql.Identifier(role)))
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(released_in)))
    db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (released_in,))
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(released_in + "_sample")))
    db.close()


#: each command's arguments, from the world's names (w); every command of plpy-anon is here
COMMANDS = {
    "install": lambda w: [],
    "release-status": lambda w: [],
    "release-audit": lambda w: [w["release"]],
    "release-report": lambda w: [w["release"]],
    "risk-report": lambda w: [w["release"], "--population", "4000"],
    "sweep": lambda w: [w["source"], "--k", "2,5,10", "--quasi-identifiers", QI_OPTION, "--sensitive", "salary"],
    "release-frame": lambda w: [w["release"], "--limit", "5"],
    "load-sample": lambda w: ["hr", "--schema-name", w["schema"] + "_sample"],
    "refresh": lambda w: [w["release"]],
    "refresh-all": lambda w: [],
    "mondrian-view": lambda w: [w["source"], "--k", "8", "--quasi-identifiers", QI_OPTION, "--sensitive", "salary",
                                "--release-schema", w["schema"]],
    "break-merge": lambda w: [w["source"], "--k", "5", "--quasi-identifiers", QI_OPTION, "--sensitive", "salary",
                              "--identifiers", "id", "--release-schema", w["schema"]],
    "trust-view": lambda w: [w["source"], "--requester", w["requester"], "--purpose", w["purpose"],
                             "--quasi-identifiers", QI_OPTION, "--sensitive", "salary", "--gamma", "1",
                             "--d-min", "0.3", "--d-max", "0.3", "--release-schema", w["schema"]],
    "pattern-view": lambda w: [w["source"], "--columns", ",".join(NUMERIC_QIS), "--sensitive", "salary",
                               "--seed", "7", "--release-schema", w["schema"]],
    "fusion-resilient-view": lambda w: [w["source"], "--sensitive", "salary", "--identifier", "id",
                                        "--auxiliary", f"{w['source']}_aux", "--attributes", ",".join(NUMERIC_QIS),
                                        "--k-from", "5", "--k-to", "5", "--repeats", "1",
                                        "--release-schema", w["schema"]],
    "snapshot": lambda w: [w["release"], "--snapshot-schema", w["schema"] + "_snap", "--replace"],
    "export": lambda w: [w["release"], "-o", str(w["files"] / "people.csv"), "--force"],
    "report": lambda w: [w["release"], "-o", str(w["files"] / "report.html"), "--force", "--population", "4000"],
    "column-roles": lambda w: [w["source"]],
    "detect-identifiers": lambda w: [w["source"], "--sample-size", "100"],
    "set-column-role": lambda w: [w["source"], "--identifiers", "id"],
    "set-hierarchy-csv": lambda w: [w["source"], "sex", str(w["files"] / "sex.csv")],
    "drop-hierarchy": lambda w: [w["source"], "sex"],
    "load-queries": lambda w: [str(w["files"] / "postgresql.log"), "--source", w["source"]],
    "schedule-refresh": lambda w: [w["release"], "0 3 * * *"],
    "unschedule-refresh": lambda w: [w["release"]],
    "grant-analyst": lambda w: [w["role"]],
    "revoke-analyst": lambda w: [w["role"]],
    "drop-release": lambda w: [w["doomed"]],
}


def contract_arguments(method):
    """A release method's command not written above runs with its contract entry's arguments
    (tests/contract/methods.py), as options: no list of methods here."""
    def arguments(w):
        options = ["--k", "5"] if method.k_arg == "k" else []
        for name, value in method.fixed.items():
            value = ",".join(value) if isinstance(value, list) else str(value)
            options += [f"--{name.replace('_', '-')}", value]
        return [w["source"], *options, "--release-schema", w["schema"]]
    return arguments


for _surface in SURFACES.values():
    COMMANDS.setdefault(_surface.function.replace("_", "-"),
                        contract_arguments(BY_NAME[_surface.function]))


def integral_floats(value, path="$"):
    """Where ``value`` (parsed JSON) holds a float without a fraction: a count written as 400.0."""
    if isinstance(value, float) and value.is_integer():
        yield path
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from integral_floats(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from integral_floats(v, f"{path}.{k}")


def test_every_command_is_checked():
    assert set(COMMANDS) == set(main.commands)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_json_output_has_no_integer_as_a_float(world, command, db):
    result = CliRunner().invoke(main, ["--dsn", world["dsn"], "--quiet", "--format", "json", command,
                                       *COMMANDS[command](world)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    parsed = json.loads(result.stdout)
    assert parsed, result.stdout
    assert not list(integral_floats(parsed)), result.stdout
    if command == "risk-report":      # the figures that are counts, as integers
        by_measure = {r["measure"]: r["value"] for r in parsed if r["column_name"] is None}
        assert by_measure["rows"] == 400 and isinstance(by_measure["rows"], int)
        assert isinstance(by_measure["classes"], int) and isinstance(by_measure["smallest_class"], int)
        assert by_measure["classes"] == db.execute(
            sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} GROUP BY age, hours, sex, job) c").format(
                sql.SQL(world["release"]))).fetchone()[0]


def test_csv_writes_integer_figures_without_a_fraction(world):
    result = CliRunner().invoke(main, ["--dsn", world["dsn"], "--format", "csv", "risk-report", world["release"]],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = {line.split(",")[0]: line.split(",")[2] for line in result.stdout.splitlines()[1:]}
    assert rows["rows"] == "400" and rows["prosecutor_records_at_risk"] == "0"
