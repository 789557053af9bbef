"""Every ```sql block of README.md and docs/ runs as written, in order, against a real database:
docs that paste. A block that needs more says so in a marker on the
line before its fence (an HTML comment, invisible once rendered). The tables the examples read
come from the documents' own blocks (anon.load_sample), nothing hidden:

    <!-- docs-test: fresh [name] -->        from this block on, a new database (named so, if given)
    <!-- docs-test: skip <why> -->         not run; the reason is listed by the coverage test
    <!-- docs-test: output -->             the output shown after it is psql's, compared line by line
                                           (floats at 4 digits: SET extra_float_digits = -11)

A block whose output, shown in the document right after it, holds an ``ERROR:`` line must fail
with that message. Blocks run in a database of their own per document, in the document's order (a
later block reads what an earlier one made), as a superuser, with the extension installed
(unless the block installs it); roles a document creates are dropped after it."""
from __future__ import annotations

import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->")


@dataclass
class Block:
    document: Path
    line: int
    text: str
    directives: dict
    error: str | None = None       # the ERROR line the document shows for it
    output: str | None = None      # the output block the document shows after it

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks_of(document: Path) -> list[Block]:
    lines = document.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```sql":
            directives = {}
            j = i - 1
            while j >= 0 and MARKER.search(lines[j]):
                kind, arg = MARKER.search(lines[j]).groups()
                directives[kind] = arg
                j -= 1
            end = next(k for k in range(i + 1, len(lines)) if lines[k].strip().startswith("```"))
            error = None
            if end + 1 < len(lines) and lines[end + 1].strip() == "```":          # its output
                close = next(k for k in range(end + 2, len(lines)) if lines[k].strip() == "```")
                error = next((line.removeprefix("ERROR:").strip() for line in lines[end + 2:close]
                              if line.startswith("ERROR:")), None)
                output = "\n".join(lines[end + 2:close])
            else:
                output = None
            found.append(Block(document, i + 1, "\n".join(lines[i + 1:end]), directives, error, output))
            i = end
        i += 1
    return found


ALL = [b for d in DOCUMENTS for b in blocks_of(d)]


class Database:
    """The database a document's blocks run in: empty but for what its blocks create."""

    def __init__(self, connect, name: str | None = None):
        self.connect, self.name = connect, name or f"docs_{uuid.uuid4().hex[:10]}"
        with connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        self.conn = connect(dbname=self.name)

    def close(self) -> None:
        self.conn.close()
        with self.connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(self.name)))


def psql_output(connect, dbname: str, text: str) -> str:
    """What psql prints for ``text`` (stderr's NOTICE and ERROR lines first, as a terminal shows
    them), floats at 4 significant digits, psql's location prefix removed."""
    from tests.db.test_snapshot import libpq_env, pg_bin
    with connect(dbname=dbname) as conn:
        info = conn.info
        env = libpq_env({"host": info.host, "port": info.port, "user": info.user, "dbname": dbname})
    done = subprocess.run([pg_bin("psql"), "-X", "-q", "-d", dbname, "-c", "SET extra_float_digits = -11",
                           "-c", text], check=False, env=env, capture_output=True, text=True, timeout=600)
    return re.sub(r"^psql:[^:\n]*:\d+: ", "", (done.stderr + done.stdout).rstrip(), flags=re.MULTILINE)


def normalized(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines()]


def run_document(connect, document: Path) -> list[str]:
    """Run the document's blocks in order; the failures, one line each."""
    blocks = [b for b in blocks_of(document) if "skip" not in b.directives]
    failures, database = [], None
    with connect(dbname="postgres") as admin:
        roles = {r for (r,) in admin.execute("SELECT rolname FROM pg_roles")}
    try:
        for block in blocks:
            if database is None or "fresh" in block.directives:
                if database is not None:
                    database.close()
                database = Database(connect, block.directives.get("fresh") or None)
                if "CREATE EXTENSION plpy_anon" not in block.text:
                    database.conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            if "output" in block.directives:
                shown = psql_output(connect, database.name, block.text)
                if normalized(shown) != normalized(block.output or ""):
                    failures.append(f"{block.name}: psql shows\n{shown}\nthe document shows\n{block.output}")
                continue
            try:
                database.conn.execute(block.text)
            except psycopg.Error as error:
                message = (error.diag.message_primary or str(error)).strip()
                if block.error is None or message != block.error:
                    failures.append(f"{block.name}: {error.sqlstate}: {message}"
                                    + (f" (the document shows: {block.error})" if block.error else ""))
            else:
                if block.error is not None:
                    failures.append(f"{block.name}: ran, but the document shows: ERROR: {block.error}")
    finally:
        if database is not None:
            database.close()
        with connect(dbname="postgres") as admin:
            for (role,) in admin.execute("SELECT rolname FROM pg_roles").fetchall():
                if role not in roles:
                    admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    return failures


# documents whose examples take minutes: fusion.md runs the fusion attack's simulations (three scans
# of k = 2..12 on 1,000 employees)
SLOW_DOCUMENTS = {"fusion.md"}


@pytest.mark.parametrize("document", [
    pytest.param(d, marks=pytest.mark.slow) if d.name in SLOW_DOCUMENTS else d
    for d in DOCUMENTS if blocks_of(d)], ids=lambda d: d.name)
def test_every_sql_block_runs_as_written(connect, document):
    failures = run_document(connect, document)
    assert not failures, "\n".join(failures)


def test_at_least_nine_blocks_in_ten_run():
    skipped = [f"{b.name} ({b.directives['skip']})" for b in ALL if "skip" in b.directives]
    assert len(ALL) >= 20
    assert len(skipped) <= 0.1 * len(ALL), "skipped: " + "; ".join(skipped)
