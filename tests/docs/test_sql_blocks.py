"""Every snippet of README.md and docs/ runs as written, in order, against a real database, and its
output is compared with the output the document shows: docs that paste. The tables the examples
read come from the documents' own blocks (anon.load_sample), nothing hidden.

Snippets, by their fence:

- ```sql: run over one connection; the plain block right after it (if any) is its output, as
  psql prints it, compared line by line (floats at 4 digits: SET extra_float_digits = -11); a
  markdown table after it is its last result, compared cell by cell (floats at 6 digits, %g). A
  block without a shown output must succeed.
- a plain (or ```sh) block of ``$ command`` lines: a console session. Each command runs in bash
  (``plpy-anon`` is the venv's) with PGDATABASE and the libpq variables naming the document's
  database; ``export NAME=VALUE`` sets a variable for the later commands; the lines up to the next
  ``$`` are its output (stdout and stderr, as a terminal shows them).
- a plain block of ``psql>`` (or ``=>``) lines: a psql session. Each statement (continued on the
  following indented lines while its parentheses are open) runs in psql; ``SET``/``RESET`` and
  ``\\x`` lines carry over to the later statements (as in one session); the lines up to the
  next prompt are what psql prints (NOTICE and ERROR lines first).
- ```sh without prompts: each command (continued by a backslash) runs as above and must exit 0.
- ```python: run in a subprocess of the venv's Python; a ``AnonClient("...")`` connection string
  names the document's database instead.

A marker on the line(s) before a fence (an HTML comment, invisible once rendered) says more:

    <!-- docs-test: fresh [name] -->        from this snippet on, a new database (named so, if given)
    <!-- docs-test: skip <why> -->         not run (it needs what a test cannot have)
    <!-- docs-test: text <what> -->        not a snippet: a signature, a layout, a configuration

Every other fence must be one of the kinds above: test_every_snippet_is_run_or_says_why fails on a
fence it cannot classify, and computes the share of shown outputs that are compared (>= 95 %).

Normalizations of what a run prints (applied to the shown and the actual output alike), each for
a value that differs from run to run and nothing else:

- CLI progress lines ``[    0.3s]`` and durations ``0.05 s``: wall-clock times;
- cells of columns named ``*seconds*`` or ``*_at`` (``refresh_seconds``, ``refreshed_at``) and
  timestamps ``2026-11-27 05:07:38.200205+00:00``: times of the run; when a table holds one, its
  spacing is compared collapsed (its widths follow from the varying value's width);
- the directory commands run in (a temporary one) reads as ``/home/dba``, the documents' home;
- the day in snapshot names (``_20261123``) is the day of the run.

Blocks run in a database of their own per document, in the document's order (a later block reads
what an earlier one made), as a superuser, with the extension installed (unless the block installs
it); roles a document creates are dropped after it.

``PLPY_ANON_DOCS_REGENERATE=1`` rewrites, in the document, every shown output that differs with the
output of this run (read the diff before committing it: a changed output is a changed behaviour)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
# docs/sql-reference.md is written by sql/build.py: the functions' signatures, no snippet
DOCUMENTS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md")
                                         if p.name != "sql-reference.md")]
MARKER = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->")
REGENERATE = os.environ.get("PLPY_ANON_DOCS_REGENERATE") == "1"
PSQL_PROMPT = re.compile(r"^(psql> |=> )")
VENV_BIN = Path(sys.executable).parent
HOME = "/home/dba"

# shown outputs compared / shown outputs: the floor the coverage test holds
TARGET_COMPARED = 0.95


@dataclass
class Block:
    document: Path
    line: int                      # the fence's line (1-based)
    kind: str                      # sql, console, psql, python, skip, text, unknown
    text: str
    directives: dict
    output: str | None = None      # sql: the output block the document shows after it
    output_lines: tuple[int, int] | None = None  # sql: 0-based [first, last) lines of that output
    body_lines: tuple[int, int] = (0, 0)          # 0-based [first, last) lines of the body
    steps: list = field(default_factory=list)     # console/psql: (command, shown output)
    form: str = "unknown"          # the kind its fence and lines give, skipped or not
    table: list[str] | None = None  # sql: the markdown table of its last result shown after it
    table_lines: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    @property
    def error(self) -> str | None:
        """The ERROR line the document shows for an sql block."""
        return next((line.removeprefix("ERROR:").strip() for line in (self.output or "").splitlines()
                     if line.startswith("ERROR:")), None)

    @property
    def shows_output(self) -> bool:
        if self.form == "sql":
            return self.output is not None or self.table is not None
        if self.form in ("console", "psql"):
            return any(out.strip() for _, out in self.steps)
        return self.form == "unknown"   # a skipped plain block: a session or an output


def console_steps(lines: list[str]) -> list[tuple[str, str]]:
    steps, i = [], 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + lines[i].strip()
            out = []
            while i + 1 < len(lines) and not lines[i + 1].startswith("$ "):
                i += 1
                out.append(lines[i])
            steps.append((command, "\n".join(out).strip("\n")))
        i += 1
    return steps


def shell_commands(lines: list[str]) -> list[str]:
    """The commands of a ```sh block without prompts: its lines, continued by a backslash."""
    commands, current = [], ""
    for line in lines:
        current += line.split("  #")[0].rstrip().removesuffix("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            if current.strip():
                commands.append(current.strip())
            current = ""
    return commands


def psql_steps(lines: list[str]) -> list[tuple[str, str]]:
    steps, i = [], 0
    while i < len(lines):
        match = PSQL_PROMPT.match(lines[i])
        if match:
            statement = [lines[i][match.end():]]
            while (sum(s.count("(") - s.count(")") for s in statement) > 0 and i + 1 < len(lines)
                   and lines[i + 1][:1].isspace()):
                i += 1
                statement.append(lines[i])
            out = []
            while i + 1 < len(lines) and not PSQL_PROMPT.match(lines[i + 1]):
                i += 1
                out.append(lines[i])
            steps.append(("\n".join(statement), "\n".join(out).strip("\n")))
        i += 1
    return steps


def blocks_of(document: Path) -> list[Block]:
    lines = document.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = lines[i].strip()
        if not fence.startswith("```"):
            i += 1
            continue
        lang = fence[3:].strip()
        directives, j = {}, i - 1
        while j >= 0 and MARKER.search(lines[j]):
            kind, arg = MARKER.search(lines[j]).groups()
            directives[kind] = arg
            j -= 1
        end = next(k for k in range(i + 1, len(lines)) if lines[k].strip().startswith("```"))
        body = lines[i + 1:end]
        block = Block(document, i + 1, "unknown", "\n".join(body), directives, body_lines=(i + 1, end))
        if lang == "sql":
            block.kind = "sql"
        elif lang == "python":
            block.kind = "python"
        elif lang in ("sh", "bash") and not any(line.startswith("$ ") for line in body):
            block.kind, block.steps = "shell", [(c, "") for c in shell_commands(body)]
        elif any(line.startswith("$ ") for line in body):
            block.kind, block.steps = "console", console_steps(body)
        elif any(PSQL_PROMPT.match(line) for line in body):
            block.kind, block.steps = "psql", psql_steps(body)
        if lang == "sql" and end + 1 < len(lines) and lines[end + 1].strip() == "```":   # its output
            close = next(k for k in range(end + 2, len(lines)) if lines[k].strip() == "```")
            block.output = "\n".join(lines[end + 2:close])
            block.output_lines = (end + 2, close)
            end = close
        elif lang == "sql":                      # or a markdown table of its last result
            first = next((k for k in range(end + 1, len(lines)) if lines[k].strip()), len(lines))
            if first < len(lines) and lines[first].startswith("|"):
                last = next((k for k in range(first, len(lines)) if not lines[k].startswith("|")),
                            len(lines))
                block.table, block.table_lines = lines[first:last], (first, last)
        block.form = block.kind
        if "skip" in directives:
            block.kind = "skip"
        elif "text" in directives:
            block.kind = "text"
        found.append(block)
        i = end + 1
    return found


ALL = [b for d in DOCUMENTS for b in blocks_of(d)]


class Database:
    """The database a document's blocks run in: empty but for what its blocks create."""

    def __init__(self, connect, name: str | None = None):
        self.connect, self.name = connect, name or f"docs_{uuid.uuid4().hex[:10]}"
        with connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        self.conn = connect(dbname=self.name)
        info = self.conn.info
        self.env = {**os.environ, "PGHOST": info.host, "PGPORT": str(info.port), "PGUSER": info.user,
                    "PGDATABASE": self.name, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}

    def close(self) -> None:
        self.conn.close()
        with self.connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(self.name)))


def pg_bin(tool: str) -> str:
    from tests.db.test_snapshot import pg_bin as find
    return find(tool)


def psql_output(database: Database, text: str, session: tuple[str, ...] = ()) -> str:
    """What psql prints for ``text`` (stderr's NOTICE and ERROR lines first, as a terminal shows
    them), floats at 4 significant digits, psql's location prefix removed; ``session``: the SET
    statements run before it."""
    commands = [arg for s in ("SET extra_float_digits = -11", *session) for arg in ("-c", s)]
    done = subprocess.run([pg_bin("psql"), "-X", "-q", *commands, "-c", text], check=False,
                          env=database.env, capture_output=True, text=True, timeout=600)
    return re.sub(r"^psql:[^:\n]*:\d+: ", "", (done.stderr + done.stdout).rstrip(), flags=re.MULTILINE)


def console_output(env: dict, cwd: str, command: str) -> str:
    """What a terminal shows: stdout and stderr in one stream, as they were written."""
    done = subprocess.run(["bash", "-c", command], check=False, env=env, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return done.stdout.rstrip().replace(cwd, HOME)


VARYING_HEADER = re.compile(r"seconds|_at$")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d(:\d\d)?)?")


def normalized(text: str) -> list[str]:
    """The lines of an output with what varies from run to run replaced (see the module's doc)."""
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    lines = [re.sub(r"^\[\s*\d+(\.\d+)?s\]", "[t]", line) for line in lines]
    lines = [re.sub(r"\b\d+(\.\d+)? s\b", "N s", line) for line in lines]
    lines = [re.sub(r"(_\d{8})\b", "_YYYYMMDD", line) for line in lines]
    out, varying, collapse = [], None, False
    for n, line in enumerate(lines):
        if n + 1 < len(lines) and re.fullmatch(r"-+(\+-+)*", lines[n + 1].strip()) and "|" in line:
            varying = [bool(VARYING_HEADER.search(h.strip())) for h in line.split("|")]
            collapse = any(varying)
        elif varying and "|" in line and not re.fullmatch(r"[-+]+", line.strip()):
            cells = line.split("|")
            line = "|".join("<varies>" if i < len(varying) and varying[i] and c.strip() else c
                            for i, c in enumerate(cells))
        elif not line.strip() or re.fullmatch(r"\(\d+ rows?\)", line.strip()):
            varying = None
        if TIMESTAMP.search(line):
            line, collapse = TIMESTAMP.sub("<timestamp>", line), True
        out.append(line)
    if collapse:
        out = [re.sub(r"-{2,}", "-", re.sub(r"\s+", " ", line)).strip() for line in out]
    return out


def run_document(connect, document: Path) -> tuple[list[str], dict]:
    """Run the document's snippets in order; the failures, one line each, and the regenerated
    output of each snippet whose shown output differs: {(first, last) 0-based lines: new text}."""
    blocks = [b for b in blocks_of(document) if b.kind in RUNNABLE]
    failures, rewrites, database = [], {}, None
    env: dict = {}
    cwd = tempfile.mkdtemp(prefix="docs_")    # the documents' files (exports, reports) land here
    with connect(dbname="postgres") as admin:
        roles = {r for (r,) in admin.execute("SELECT rolname FROM pg_roles")}
    try:
        for block in blocks:
            if database is None or "fresh" in block.directives:
                if database is not None:
                    database.close()
                database = Database(connect, block.directives.get("fresh") or None)
                env = dict(database.env)
                if "CREATE EXTENSION plpy_anon" not in block.text:
                    database.conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            if block.kind == "sql":
                run_sql(database, block, failures, rewrites)
            elif block.kind == "python":
                run_python(database, env, cwd, block, failures)
            else:
                run_session(database, env, cwd, block, failures, rewrites)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
        if database is not None:
            database.close()
        with connect(dbname="postgres") as admin:
            for (role,) in admin.execute("SELECT rolname FROM pg_roles").fetchall():
                if role not in roles:
                    admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    return failures, rewrites


def run_sql(database: Database, block: Block, failures: list, rewrites: dict) -> None:
    if block.output is not None:
        shown = psql_output(database, block.text)
        if normalized(shown) != normalized(block.output):
            failures.append(f"{block.name}: psql shows\n{shown}\nthe document shows\n{block.output}")
            rewrites[block.output_lines] = shown
        return
    try:
        cursor = database.conn.execute(block.text)
    except psycopg.Error as error:
        message = (error.diag.message_primary or str(error)).strip()
        failures.append(f"{block.name}: {error.sqlstate}: {message}")
        return
    if block.table is not None:
        shown = markdown_table(cursor)
        if [row_cells(line) for line in shown] != [row_cells(line) for line in block.table]:
            failures.append(f"{block.name}: the query gives\n" + "\n".join(shown)
                            + "\nthe document shows\n" + "\n".join(block.table))
            rewrites[block.table_lines] = "\n".join(shown)


def markdown_table(cursor) -> list[str]:
    """The last result of ``cursor`` as a markdown table: floats at 6 significant digits (%g),
    NULL as an empty cell."""
    while cursor.nextset():
        pass
    names = [d.name for d in cursor.description]

    def cell(value) -> str:
        return "" if value is None else format(value, "g") if isinstance(value, float) else str(value)
    return ["| " + " | ".join(names) + " |", "|" + "---|" * len(names),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in cursor.fetchall())]


def row_cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def run_session(database: Database, env: dict, cwd: str, block: Block, failures: list,
                rewrites: dict) -> None:
    """A console or psql session: each step's output compared; the block rewritten if one differs."""
    session: list[str] = []
    outputs = []
    for command, shown in block.steps:
        if block.kind == "psql":
            actual = psql_output(database, command, tuple(session))
            if re.match(r"(SET|RESET)\b|\\x\b", command.strip(), re.IGNORECASE):
                session.append(command)
        else:
            export = re.fullmatch(r"export (\w+)=(\S*)", command.strip())
            if export:
                env[export[1]] = export[2]
                actual = ""
            elif block.kind == "shell":
                done = subprocess.run(["bash", "-c", command], check=False, env=env, cwd=cwd,
                                      capture_output=True, text=True, timeout=600)
                if done.returncode:
                    failures.append(f"{block.name}: `{command}` exits {done.returncode}\n"
                                    f"{done.stderr[-2000:]}")
                continue
            else:
                actual = console_output(env, cwd, command)
        outputs.append(actual)
        if normalized(actual) != normalized(shown):
            failures.append(f"{block.name}: `{command}` prints\n{actual}\nthe document shows\n{shown}")
    if any(normalized(a) != normalized(s) for a, (_, s) in zip(outputs, block.steps)):
        prompt = "$ " if block.kind == "console" else next(
            PSQL_PROMPT.match(line)[0] for line in block.text.splitlines() if PSQL_PROMPT.match(line))
        text = []
        for (command, _), actual in zip(block.steps, outputs):
            text.append(prompt + command)
            if actual:
                text.append(actual)
            if block.kind == "console" and actual:
                text.append("")
        rewrites[block.body_lines] = "\n".join(text).rstrip("\n")


def run_python(database: Database, env: dict, cwd: str, block: Block, failures: list) -> None:
    code = re.sub(r'AnonClient\("[^"]*"', f'AnonClient("dbname={database.name}"', block.text)
    done = subprocess.run([sys.executable, "-c", code], check=False, env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        failures.append(f"{block.name}: python exits {done.returncode}\n{done.stderr[-2000:]}")


def rewrite(document: Path, rewrites: dict, read: list[str]) -> None:
    """Replace the shown outputs, unless the document changed since the test read it."""
    lines = document.read_text().splitlines()
    if lines != read:
        pytest.fail(f"{document.name} changed while its snippets ran: not rewritten")
    for (first, last), text in sorted(rewrites.items(), reverse=True):
        lines[first:last] = [line.rstrip() for line in text.splitlines()]
    document.write_text("\n".join(lines) + "\n")


# documents whose examples take minutes: fusion.md runs the fusion attack's simulations (three scans
# of k = 2..12 on 1,000 employees)
SLOW_DOCUMENTS = {"fusion.md"}
RUNNABLE = ("sql", "console", "psql", "python", "shell")


@pytest.mark.parametrize("document", [
    pytest.param(d, marks=pytest.mark.slow) if d.name in SLOW_DOCUMENTS else d
    for d in DOCUMENTS if any(b.kind in RUNNABLE for b in blocks_of(d))], ids=lambda d: d.name)
def test_every_snippet_runs_as_written_and_prints_what_it_shows(connect, document):
    read = document.read_text().splitlines()
    failures, rewrites = run_document(connect, document)
    if REGENERATE and rewrites:
        rewrite(document, rewrites, read)
    assert not failures, "\n".join(failures)


def coverage() -> dict:
    return {
        "snippets": [b for b in ALL if b.kind != "text"],
        "run": [b for b in ALL if b.kind in RUNNABLE],
        "shown": [b for b in ALL if b.kind != "text" and b.shows_output],
        "compared": [b for b in ALL if b.kind in RUNNABLE and b.shows_output],
        "skipped": [b for b in ALL if b.kind == "skip"],
        "unknown": [b for b in ALL if b.kind == "unknown"],
    }


def test_every_snippet_is_run_or_says_why():
    """Each fence is a snippet the docs test runs, or carries a marker saying why not; of the
    snippets that show an output, >= 95 % are compared with it."""
    c = coverage()
    assert not c["unknown"], "fences neither run nor marked: " + ", ".join(b.name for b in c["unknown"])
    with_output = len(c["shown"])
    share = len(c["compared"]) / with_output
    not_run = "; ".join(f"{b.name} ({b.directives['skip']})" for b in c["skipped"])
    print(f"\n{len(c['run'])} of {len(c['snippets'])} snippets run; {len(c['compared'])} of "
          f"{with_output} shown outputs compared ({share:.0%}); not run: {not_run}")
    assert len(c["run"]) >= 40
    assert share >= TARGET_COMPARED, f"{share:.0%} compared; not run: {not_run}"


REFRESH_SHOWN = """\
[    0.3s] done: 900 rows, k = 15, 0.05 s
 release      | row_count | refreshed_at                     | refresh_seconds
--------------+-----------+----------------------------------+----------------------
 patients_k10 | 900       | 2026-11-27 05:07:38.200205+00:00 | 0.018511163001676323
(1 row)"""


def test_outputs_compare_equal_when_only_times_differ_and_unequal_when_a_value_does():
    run_again = (REFRESH_SHOWN.replace("0.3s", "12.8s").replace("0.05 s", "3.41 s")
                 .replace("05:07:38.200205", "17:00:01.5").replace("0.018511163001676323", "2.5"))
    assert normalized(run_again) == normalized(REFRESH_SHOWN)
    for changed in (REFRESH_SHOWN.replace("| 900 ", "| 901 "), REFRESH_SHOWN.replace("k = 15", "k = 16"),
                    REFRESH_SHOWN.replace("patients_k10", "patients_k11")):
        assert normalized(changed) != normalized(REFRESH_SHOWN)


def test_a_table_without_a_varying_value_is_compared_with_its_spacing():
    shown = " k | n\n---+---\n 2 | 5\n(1 row)"
    assert normalized(shown.replace(" 2 | 5", "  2 | 5")) != normalized(shown)
