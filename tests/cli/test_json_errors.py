"""--format json makes errors JSON on stderr too (sqlstate, message, detail, hint)."""
import json

from click.testing import CliRunner

from plpy_anon.cli import main


def test_errors_are_json_on_stderr_with_format_json():
    runner = CliRunner()
    result = runner.invoke(main, ["--dsn", "host=/nonexistent_plpy_anon dbname=x",
                                  "--format", "json", "release-status"])
    assert result.exit_code == 3                                  # could not connect
    error = json.loads(result.stderr.strip().splitlines()[-1])
    assert set(error) == {"sqlstate", "message", "detail", "hint"}
    assert error["sqlstate"].startswith("08") and "-h" in error["hint"]
    assert error["message"].startswith("connection to server")     # libpq's words, no psycopg prefix
