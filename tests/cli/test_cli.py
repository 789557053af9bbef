"""plpy-anon end to end: the commands of the issue against the real extension, exit codes and
one-line errors. Each invocation is a new session (as from a shell), so they are kept few."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from plpy_anon.cli import main
from tests.helpers import encoded_database, release_schema_of

TABLE = """
CREATE TABLE patients (id int PRIMARY KEY, name text, age int, sex text, zip text, diagnosis text);
INSERT INTO patients
SELECT i, 'name ' || i, 20 + (i * 37) % 60, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 6)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, 90) i;
-- "name" would otherwise be refused as an undeclared identifying column (privacy by default)
SELECT anon.set_column_role('patients', 'name', 'identifier');
"""


@pytest.fixture
def cli(pg_server, db, schema):
    """cli(*args) -> click Result, with --dsn of the test database."""
    db.execute(TABLE)
    dsn = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
    runner = CliRunner()

    def run(*args):
        return runner.invoke(main, ["--dsn", dsn, *args], catch_exceptions=False)
    return run


def test_the_issue_workflow(cli, db, schema, tmp_path):
    hierarchy = tmp_path / "zip.csv"
    hierarchy.write_text("".join(f"5370{i};537**;*\n" for i in range(6)))
    declared = cli("--format", "json", "set-column-role", "patients", "--identifiers", "name", "--sensitive", "diagnosis")
    assert declared.exit_code == 0, declared.output
    roles = {r["column_name"]: r["role"] for r in json.loads(declared.stdout)}
    assert roles["name"] == "identifier" and roles["diagnosis"] == "sensitive"
    loaded = cli("set-hierarchy-csv", "patients", "zip", str(hierarchy), "--format", "json")
    assert json.loads(loaded.stdout) == [{"table": "patients", "column": "zip", "leaves": 6}]

    created = cli("mondrian-view", "patients", "--k", "5", "--quasi-identifiers", "age,sex,zip",
                  "--sensitive", "diagnosis", "--release-schema", release_schema_of(schema), "--format", "json")
    assert created.exit_code == 0, created.output
    release = json.loads(created.stdout)[0]["release"]
    assert release == f"{release_schema_of(schema)}.patients_k5"
    assert "creating a mondrian_view release" in created.stderr
    assert "deprecated" not in created.stderr

    listed = cli("--format", "json", "release-status")
    rows = {r["release"]: r for r in json.loads(listed.stdout)}
    assert rows[release]["row_count"] == 90 and rows[release]["achieved_k"] >= 5

    db.execute("INSERT INTO patients SELECT i, 'n', 33, 'F', '53701', 'flu' FROM generate_series(91, 95) i")
    refreshed = cli("refresh", release, "--format", "json")
    assert refreshed.exit_code == 0, refreshed.output
    assert json.loads(refreshed.stdout)[0]["row_count"] == 95
    phases = refreshed.stderr.splitlines()
    assert any("building the new release" in p for p in phases) and any("done: 95 rows" in p for p in phases)

    report = cli("release-report", release, "--format", "csv")
    header, _first = report.stdout.splitlines()[:2]
    assert "achieved_k" in header.split(",")
    shown = cli("release_frame", release, "--limit", "0", "--format", "csv")
    lines = shown.stdout.splitlines()
    assert lines[0] == "age,sex,zip,diagnosis" and len(lines) == 1 + 95
    labels = {"537**", "*"} | {f"5370{i}" for i in range(6)}     # the hierarchy's nodes
    zips = [line.rsplit(",", 2)[1] for line in lines[1:]]     # age may hold a comma: split from the right
    assert set(zips) <= labels

    table = cli("release-status")
    assert table.stdout.splitlines()[0].split("|")[0].strip() == "release"
    assert table.stdout.rstrip().endswith("row)") or table.stdout.rstrip().endswith("rows)")

    dropped = cli("drop-release", release, "--format", "json")
    assert json.loads(dropped.stdout) == [{"release": release, "dropped": True}]


def test_failures_exit_non_zero_with_one_line(cli, schema):
    bad_k = cli("mondrian-view", "patients", "--k", "1", "--release-schema", release_schema_of(schema))
    assert bad_k.exit_code == 1
    assert bad_k.stdout == ""
    lines = bad_k.stderr.strip().splitlines()
    assert lines[0].endswith("creating a mondrian_view release of patients")   # the client's phase
    assert lines[-1].startswith("plpy-anon: error: k must be at least 2") and "(hint: " in lines[-1]
    missing = cli("--quiet", "refresh", "no_such_release")
    assert missing.exit_code == 4                                # not found
    assert missing.stderr.strip() == ('plpy-anon: error: release "no_such_release" does not exist '
                                      '(hint: See SELECT release_schema, release_name FROM anon.releases.)')
    usage = cli("refresh")
    assert usage.exit_code == 2


@pytest.mark.parametrize("dsn", ["not a=dsn", "postgresql://not a dsn", "dbname='unterminated"])
def test_a_malformed_connection_string_is_a_usage_error_in_one_line(dsn):
    result = CliRunner().invoke(main, ["-d", dsn, "release-status"], catch_exceptions=False)
    assert result.exit_code == 2, result.output          # usage, not 70 (internal error)
    assert "Traceback" not in result.stderr
    assert "not a connection string or URI" in result.stderr


def test_a_database_name_that_does_not_exist_is_a_connection_failure(pg_server):
    result = CliRunner().invoke(main, ["-d", "not a dsn", "-h", pg_server["host"], "-p", str(pg_server["port"]),
                                       "-U", pg_server["user"], "release-status"], catch_exceptions=False)
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.stderr and 'database "not a dsn" does not exist' in result.stderr


def test_load_queries_grant_and_revoke(cli, db, schema, tmp_path):
    log = tmp_path / "postgresql.log"
    log.write_text(
        "2026-11-21 10:00:00.000 UTC [7] LOG:  statement: SELECT age FROM patients WHERE sex = 'F'\n"
        "2026-11-21 10:00:01.000 UTC [7] LOG:  duration: 1.5 ms  statement: SELECT zip FROM patients\n")
    loaded = cli("load-queries", str(log), "--format", "json")
    assert loaded.exit_code == 0, loaded.output
    assert json.loads(loaded.stdout) == [{"statements": 2, "distinct": 2, "skipped_entries": 0}]
    missing = cli("load-queries", str(tmp_path / "nope.log"))
    assert missing.exit_code == 2                                # click checks the path first

    db.execute("CREATE ROLE cli_analyst")
    try:
        assert cli("--quiet", "mondrian-view", "patients", "--k", "5", "--release-schema", release_schema_of(schema)).exit_code == 0
        granted = cli("grant-analyst", "cli_analyst", "--format", "json")
        assert json.loads(granted.stdout)[0]["releases"] >= 1
        assert db.execute("SELECT has_table_privilege('cli_analyst', %s, 'SELECT')",
                          (f"{release_schema_of(schema)}.patients_k5",)).fetchone()[0]
        revoked = cli("revoke-analyst", "cli_analyst")
        assert revoked.exit_code == 0
        assert not db.execute("SELECT has_table_privilege('cli_analyst', %s, 'SELECT')",
                              (f"{release_schema_of(schema)}.patients_k5",)).fetchone()[0]
        unknown = cli("--quiet", "grant-analyst", "no_such_role")
        assert unknown.exit_code == 4 and unknown.stderr.startswith('plpy-anon: error: role "no_such_role"')
    finally:
        db.execute("DROP OWNED BY cli_analyst; DROP ROLE cli_analyst")


def test_refresh_all_and_refresh_with_all(cli, schema):
    assert cli("--quiet", "mondrian-view", "patients", "--k", "5",
               "--release-schema", release_schema_of(schema)).exit_code == 0
    release = f"{release_schema_of(schema)}.patients_k5"
    for args in (["refresh-all"], ["refresh", "--all"]):
        result = cli("--quiet", "--format", "json", *args)
        rows = {r["release"]: r for r in json.loads(result.stdout)}
        assert rows[release]["status"] == "refreshed"
        assert result.exit_code == (0 if all(r["status"] == "refreshed" for r in rows.values()) else 1)


def test_export_writes_the_release_and_its_metadata(cli, db, schema, tmp_path):
    rel = db.execute("SELECT anon.mondrian_view('patients', k => 5, quasi_identifiers => '{age,zip}', "
                     "sensitive => '{diagnosis}', release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    out = tmp_path / "patients.csv"
    result = cli("--format", "json", "export", rel, "--format", "csv", "-o", str(out))
    assert result.exit_code == 0, result.output
    again = cli("export", rel, "--format", "csv", "-o", str(out))        # never replaced silently
    assert again.exit_code == 2 and "--force" in again.stderr
    assert cli("--quiet", "export", rel, "--format", "csv", "-o", str(out), "--force").exit_code == 0
    assert cli("--quiet", "export", rel, "-o", str(tmp_path / "raw.csv"), "--no-formula-protection").exit_code == 0
    assert json.loads(result.stdout)[0]["rows"] == 90
    assert out.read_text().splitlines()[0] == "age,zip,diagnosis" and len(out.read_text().splitlines()) == 91
    meta = json.loads((tmp_path / "patients.csv.meta.json").read_text())
    assert meta["method"] == "mondrian" and meta["achieved_k"] >= 5 and meta["exported_rows"] == 90
    parquet = cli("--quiet", "export", rel, "--format", "parquet", "-o", str(tmp_path / "p.parquet"))
    try:
        import pyarrow.parquet as pq
    except ImportError:
        assert parquet.exit_code == 1 and "pip install './[parquet]' in a clone" in parquet.stderr
    else:
        assert parquet.exit_code == 0 and pq.read_table(tmp_path / "p.parquet").num_rows == 90


def test_risk_report(cli, db, schema):
    """plpy-anon risk-report prints anon.risk_report's rows."""
    want = {(m, c): v for m, c, v, _ in db.execute(
        "SELECT * FROM anon.risk_report('patients', ARRAY['age', 'sex'], ARRAY['diagnosis'], 1000)")}
    out = cli("--format", "json", "risk-report", "patients", "--quasi-identifiers", "age,sex",
              "--sensitive", "diagnosis", "--population", "1000")
    assert out.exit_code == 0, out.output
    got = {(r["measure"], r["column_name"]): r["value"] for r in json.loads(out.stdout)}
    assert got == want and got[("rows", None)] == 90
    table = cli("risk-report", "patients", "--quasi-identifiers", "age,sex")
    assert table.exit_code == 0 and "prosecutor_risk_max" in table.stdout
    missing = cli("risk-report", "patients")
    assert missing.exit_code == 1 and "no quasi-identifiers" in missing.stderr
    assert "quasi_identifiers =>" in missing.stderr


def test_release_audit_prints_the_servers_rows(cli, db, schema):
    """plpy-anon release-audit [RELEASE] prints anon.release_audit's rows, all or the named one."""
    made = cli("--quiet", "--format", "json", "mondrian-view", "patients", "--k", "5",
               "--release-schema", release_schema_of(schema))
    release = json.loads(made.stdout)[0]["release"]
    cursor = db.execute("SELECT * FROM anon.release_audit(%s)", (release,))
    want = dict(zip([d.name for d in cursor.description], cursor.fetchone()))
    out = cli("--format", "json", "release-audit", release)
    assert out.exit_code == 0, out.output
    [got] = json.loads(out.stdout)
    assert {k: got[k] for k in ("release", "k", "achieved_k", "distinct_l", "safe", "why")} == \
        {k: want[k] for k in ("release", "k", "achieved_k", "distinct_l", "safe", "why")}
    assert got["achieved_k"] >= 5 and got["versions"] == 1
    every = cli("release-audit")
    assert every.exit_code == 0 and release in every.stdout and "safe" in every.stdout.splitlines()[0]
    missing = cli("release-audit", "no_such_release")
    assert missing.exit_code == 4 and 'release "no_such_release" does not exist' in missing.stderr


def test_a_database_without_the_extension_says_how_to_install_it(connect, pg_server):
    with encoded_database(connect, "UTF8", extension=False) as name:
        dsn = " ".join(f"{k}={v}" for k, v in dict(pg_server, dbname=name).items())
        for command in (["release-status"], ["load-sample", "patients"], ["refresh", "r"]):
            result = CliRunner().invoke(main, ["--dsn", dsn, "--quiet", *command])
            assert result.exit_code == 4, (command, result.output)
            assert result.stderr.strip() == (
                f'plpy-anon: error: the extension plpy_anon is not installed in database "{name}" '
                "(hint: Install it as a superuser: plpy-anon install (CREATE EXTENSION plpy_anon "
                "CASCADE), or connect to the database that has it (-d).)"), command
        installed = CliRunner().invoke(main, ["--dsn", dsn, "--quiet", "install"])
        assert installed.exit_code == 0, installed.output
        assert CliRunner().invoke(main, ["--dsn", dsn, "--quiet", "release-status"]).exit_code == 0
