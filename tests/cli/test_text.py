"""What the command prints is what PostgreSQL prints: float8 in its own text, arrays and ranges as
the server writes them, tables aligned by display width; plus the commands and help that keep
their word (install --version, sweep, the documentation --help names)."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from wcwidth import wcswidth, wcwidth

from plpy_anon import cli
from plpy_anon.cli import main
from tests.helpers import release_schema_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli_in(pg_server, schema):
    dsn = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"

    def run(*args):
        return CliRunner().invoke(main, ["--dsn", dsn, "--quiet", *args], catch_exceptions=False)
    return run


def test_float8_is_written_as_postgresql_writes_it(db):
    values = [30162.0, 1.0, 0.0, -0.0, 0.1, 0.30000000000000004, -2.5, 1e14, 1e15, 123456789012345.6,
              171930000000.0, 1e-4, 1e-5, 1.5e-7, 1e16, 1e300, 5e-324, 2.0 ** 53, 0.069590875936]
    server = db.execute("SELECT x::text FROM unnest(%s::float8[]) x", (values,)).fetchall()
    assert [cli.number_text(v) for v in values] == [r[0] for r in server]


def test_lists_are_written_as_postgresql_writes_arrays(db):
    lists = [["Paris", "Paris, TX", 'a"b'], [None, "NULL", "null", ""], ["back\\slash", " lead", "{x}", "é 東"]]
    server = [db.execute("SELECT %s::text[]::text", (values,)).fetchone()[0] for values in lists]
    assert [cli.cell(values) for values in lists] == server


def test_release_frame_prints_arrays_and_ranges_as_the_server_does(cli_in, db, schema):
    db.execute("CREATE TABLE towns (id int PRIMARY KEY, age int, city text)")
    db.execute("""INSERT INTO towns SELECT g, 20 + g % 3,
                  (ARRAY['Paris', 'Paris, TX', 'a"b', 'NULL', NULL, 'New York', 'back\\slash', ''])[1 + g % 8]
                  FROM generate_series(1, 80) g""")
    db.execute("SELECT anon.set_column_role('towns', 'id', 'identifier')")
    rel = db.execute("SELECT anon.mondrian_view('towns', k => 40, quasi_identifiers => '{age,city}', "
                     "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    want = sorted(db.execute(f"SELECT age::text, city::text FROM {rel}").fetchall())
    assert any('"Paris, TX"' in c for _, c in want) and any('"NULL"' in c for _, c in want)
    shown = cli_in("--format", "csv", "release-frame", rel, "--limit", "0")
    assert shown.exit_code == 0, shown.output
    rows = list(csv.reader(io.StringIO(shown.stdout)))
    assert rows[0] == ["age", "city"] and sorted(map(tuple, rows[1:])) == want
    as_json = json.loads(cli_in("--format", "json", "release-frame", rel, "--limit", "0").stdout)
    assert sorted((r["age"], r["city"]) for r in as_json) == want
    table = cli_in("release-frame", rel, "--limit", "0").stdout
    assert all(city in table for _, city in want)


def test_tables_align_wide_characters_by_display_width():
    frame = pd.DataFrame({"city": ["東京都", "Zürich", "Ａｂ", "e\u0301te"], "n": [1, 22, 333, 4444]})
    lines = cli.render_table(frame).splitlines()[:-1]          # without "(4 rows)"

    def separators(line):       # display columns of the column separators (| and the dashes' +)
        columns, at = [], 0
        for ch in line:
            if ch in "|+":
                columns.append(at)
            at += max(wcwidth(ch), 0)
        return columns
    assert len({wcswidth(line) for line in lines if not line.startswith("-")}) == 1, lines
    assert len({tuple(separators(line)) for line in lines}) == 1, lines


def test_install_of_another_version_than_the_installed_one_is_refused(cli_in, db):
    installed = db.execute("SELECT extversion FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0]
    other = "0.1.0" if installed != "0.1.0" else "9.9.9"
    refused = cli_in("install", "--version", other)
    assert refused.exit_code == 1
    assert refused.stderr.startswith(f"plpy-anon: error: plpy_anon {installed} is installed in this database, "
                                     f"not {other} (hint: ")
    assert db.execute("SELECT extversion FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0] == installed
    same = cli_in("--format", "json", "install", "--version", installed)
    assert same.exit_code == 0 and json.loads(same.stdout)[0]["installed"] == installed


def test_sweep_prints_anon_sweep(cli_in, db):
    db.execute("CREATE TABLE p (id int PRIMARY KEY, age int, sex text, dx text)")
    db.execute("INSERT INTO p SELECT g, 20 + g % 50, CASE WHEN g % 2 = 0 THEN 'F' ELSE 'M' END, 'd' || g % 4 "
               "FROM generate_series(1, 300) g")
    result = cli_in("--format", "json", "sweep", "p", "--k", "2,5,10,1000", "--quasi-identifiers", "age,sex",
                    "--sensitive", "dx", "--identifiers", "id")
    assert result.exit_code == 0, result.output
    want = db.execute("SELECT * FROM anon.sweep('p', ARRAY[2, 5, 10, 1000], quasi_identifiers => '{age,sex}', "
                      "sensitive => '{dx}', identifiers => '{id}')").fetchall()
    got = json.loads(result.stdout)
    assert [r["target_k"] for r in got] == [2, 5, 10, 1000]
    assert [tuple(r.values()) for r in got] == [tuple(w) for w in want]
    bad = cli_in("sweep", "p", "--k", "2,five")
    assert bad.exit_code == 2 and "--k" in bad.stderr


def help_texts() -> dict[str, str]:
    runner = CliRunner()
    texts = {"plpy-anon": runner.invoke(main, ["--help"]).output}
    for name in main.commands:
        texts[name] = runner.invoke(main, [name, "--help"]).output
    return texts


def test_the_documents_help_names_exist_and_describe_the_command():
    named = {(where, doc) for where, text in help_texts().items()
             for doc in re.findall(r"docs/[\w./-]+\.md", text)}
    assert ("plpy-anon", "docs/cli.md") in named
    for where, doc in named:
        assert (ROOT / doc).is_file(), f"{where} --help names {doc}, which does not exist"
    page = (ROOT / "docs" / "cli.md").read_text()
    for command in main.commands:
        assert f"`{command}" in page, f"docs/cli.md does not describe {command}"
    for status in cli.EXIT_CODES:
        assert re.search(rf"^\| {status} \|", page, re.MULTILINE), f"docs/cli.md does not list exit status {status}"
