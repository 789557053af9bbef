"""``plpy-anon --help`` and usage errors answer without loading the client's heavy libraries:
pandas and psycopg are imported by the commands that talk to a database, not by the command line
itself (a new process per call, as from a shell)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import release_schema_of

HEAVY = ("pandas", "psycopg", "numpy", "pyarrow", "matplotlib", "sklearn", "sqlglot")

RUN = """
import json, sys
sys.argv = ["plpy-anon", *json.loads(sys.argv[1])]
from plpy_anon.cli import main
try:
    main()
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "loaded": [m for m in HEAVY if m in sys.modules]}), file=sys.stderr)
""".replace("HEAVY", repr(HEAVY))


def command_line(*args: str) -> tuple[dict, str]:
    out = subprocess.run([sys.executable, "-c", RUN, json.dumps(args)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stderr.strip().splitlines()[-1]), out.stdout


@pytest.mark.parametrize("args", [("--help",), ("mondrian-view", "--help"), ("refresh", "--help"),
                                  ("no-such-command",)])
def test_help_and_usage_errors_load_no_heavy_library(args):
    result, _ = command_line(*args)
    assert result["code"] in (0, 2)
    assert result["loaded"] == []


def test_help_still_lists_every_command_and_method_option():
    _, top = command_line("--help")
    for command in ("mondrian-view", "break-merge", "refresh", "release-status", "export"):
        assert command in top
    _, mondrian = command_line("mondrian-view", "--help")
    for option in ("--k", "--quasi-identifiers", "--sensitive", "--refresh-mode"):
        assert option in mondrian


def test_refresh_and_release_status_load_no_pandas(pg_server, db, schema):
    """``refresh`` prints one record, ``release-status`` the rows of anon.release_status(): the
    client and the renderers need psycopg, not pandas."""
    db.execute("CREATE TABLE people (id int PRIMARY KEY, age int, zip text, diagnosis text);"
               "INSERT INTO people SELECT i, 20 + i % 50, lpad((i % 23)::text, 5, '0'), 'd' || i % 4 "
               "FROM generate_series(1, 200) i")
    release = db.execute(f"SELECT anon.mondrian_view('\"{schema}\".people', k => 5, "
                         "quasi_identifiers => ARRAY['age', 'zip'], sensitive => ARRAY['diagnosis'], "
                         f"identifiers => ARRAY['id'], release_schema => '{release_schema_of(schema)}')"
                         ).fetchone()[0]
    dsn = " ".join(f"{k}={v}" for k, v in pg_server.items())
    result, out = command_line("--dsn", dsn, "--format", "json", "--quiet", "refresh", release)
    assert result["code"] == 0, out
    printed = json.loads(out)
    assert printed[0]["row_count"] == 200 and printed[0]["achieved_k"] >= 5
    assert "pandas" not in result["loaded"] and "psycopg" in result["loaded"]
    result, out = command_line("--dsn", dsn, "--format", "json", "release-status")
    assert result["code"] == 0, out
    status = {r["release"]: r for r in json.loads(out)}
    assert status[release]["row_count"] == 200 and status[release]["refresh_seconds"] > 0
    assert "pandas" not in result["loaded"]
