"""Where the storage SQL of the default build (the ``build`` phase of ``bench_build``) spends its
CPU, statement by statement, from the slices of a real run saved once.

    python -m tests.bench storage      # PLPY_ANON_STORAGE_ROWS=1000000 (the default)

bench_mondrian's synthetic table (6 QIs, sensitive diagnosis), k = 10, the default (compact)
layout. The release is built once; its run's ``anon.partition_slice`` rows are then kept in a
backend (a PL/Python set-returning function yielding them from ``GD``, as the run yields its
own), so each statement below re-does one more step of what the storage's
``REFRESH MATERIALIZED VIEW`` does after the run, without the read, the fit or the publish:

* ``slices built``: the run's Python generator writing each slice's packed literals (which the
  storage's REFRESH asks for after the publish, so the ``build`` phase pays them), measured inside
  the backend (``time.process_time`` around consuming the run's iterator, no SQL conversion);
* ``slices``: the PL/Python SRF's rows converted to ``anon.partition_slice`` (bytes to bytea[]);
* ``wrapper``: the same through the PL/pgSQL wrapper the build puts around every run (its
  ``RETURN QUERY`` tuplestore), as the release's query calls it;
* ``split``: the packed literals split into one text per class and column (string_to_table);
* ``cast <column>``: that column's texts cast to its released type (range_in / array_in);
* ``split <column>``: beside a set column's cast, the same texts split into a text[] by
  ``string_to_array`` at their commas (what a literal spelled for it, with no array_in
  quoting, would cost: the same arrays only where no element needs quotes);
* ``write``: the whole storage query written into a table (CREATE TABLE AS, as REFRESH does);
* ``refresh``: the same query as a materialized view's, refreshed (REFRESH MATERIALIZED VIEW:
  a new heap filled and swapped in), beside ``write``;
* ``query``: the release's own storage query, wrapper included, written into a table;
* ``run``: the release's run itself (read, fit, publish, slices built, through the wrapper);
* ``run and query``: the release's storage query as its REFRESH runs it, run included, written
  into a table; minus ``run``, the whole storage SQL's CPU of a build;
* ``... in a new backend``: ``run`` and ``run and query`` each as the first statement of a new
  backend (its imports paid by ``anon.versions()``, as bench_build's), whose first call also
  loads the compiled kernels and fills the backend's caches.

Each figure is the backend's CPU (/proc/<pid>/schedstat: its time on a CPU) of the statement,
the smallest of ``PLPY_ANON_STORAGE_REPEATS`` (default 3) runs, beside a plain copy of the
source's CPU in the same backend; a step's own share is its figure minus the one above it. The
machine's load is printed beside them.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from tests.bench.bench_build import QIS, load
from tests.bench.bench_mondrian import fresh_backend, load_synthetic
from tests.bench.common import extension_db, markdown_table, results_dir

SCHEMA = "bench_storage"
RUN_CALL = re.compile(r"anon\._mondrian_partition_slices\((\d+)\)")

# the run's slices kept in the backend's GD, yielded as the run yields them; a first call with
# keep => true reads them from the saved table
SLICES_FUNCTION = f"""
CREATE FUNCTION {SCHEMA}.slices(release_id integer, keep boolean DEFAULT false)
RETURNS SETOF anon.partition_slice LANGUAGE plpython3u STABLE ROWS 1 AS $$
if keep or "bench_slices" not in GD:
    GD["bench_slices"] = [dict(r) for r in plpy.execute(
        "SELECT * FROM {SCHEMA}.saved ORDER BY first_position")]
return GD["bench_slices"] if not keep else []
$$"""

# the run's Python CPU in building its slices: the read, the fit and the publish done, the
# iterator it hands SQL consumed without converting anything
BUILT_FUNCTION = f"""
CREATE FUNCTION {SCHEMA}.slices_built(release_id integer) RETURNS float8
LANGUAGE plpython3u STABLE
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'iso_8601' SET TimeZone = 'UTC'
AS $$
import time
from plpy_anon.db.methods import mondrian
slices = mondrian.partition(plpy, GD, release_id)
started = time.process_time()
for _ in slices:
    pass
return time.process_time() - started
$$"""

# the wrapper sql/build.py writes around every run (clean_errors_wrapper), forwarding the rows
WRAPPER_FUNCTION = f"""
CREATE FUNCTION {SCHEMA}.wrapped(release_id integer)
RETURNS SETOF anon.partition_slice LANGUAGE plpgsql STABLE ROWS 1 AS $$
BEGIN
    BEGIN
        RETURN QUERY SELECT (q.r).* FROM (SELECT {SCHEMA}.slices($1) AS r OFFSET 0) AS q;
    EXCEPTION WHEN OTHERS THEN
        RAISE;
    END;
END
$$"""


def repeats() -> int:
    return int(os.environ.get("PLPY_ANON_STORAGE_REPEATS", "3"))


def cpu_of(conn, statement: str, after: str | None = None) -> float:
    """The smallest backend CPU of ``statement`` over repeats() runs (``after``: run untimed
    after each, e.g. a DROP)."""
    pid = conn.info.backend_pid
    best = None
    for _ in range(repeats()):
        cpu0 = backend_cpu(pid)
        conn.execute(statement).fetchall() if statement.lstrip().upper().startswith("SELECT") \
            else conn.execute(statement)
        spent = backend_cpu(pid) - cpu0
        best = spent if best is None else min(best, spent)
        if after:
            conn.execute(after)
    return best


def backend_cpu(pid: int) -> float:
    """CPU seconds of a backend so far, to the nanosecond (/proc/<pid>/schedstat: time on a CPU;
    /proc/<pid>/stat counts 10 ms ticks, coarser than most steps here)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def system_cpu(pid: int) -> float:
    """System CPU seconds of a backend so far (/proc): page faults of fresh memory among them."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / os.sysconf("SC_CLK_TCK")


def fresh_cpu(conn, statement: str, after: str | None) -> tuple[float, float]:
    """Backend CPU (total, system) of ``statement`` run first in a new backend (imports paid)."""
    with fresh_backend(conn) as other:
        pid = other.info.backend_pid
        cpu0, sys0 = backend_cpu(pid), system_cpu(pid)
        other.execute(statement)
        spent = (backend_cpu(pid) - cpu0, system_cpu(pid) - sys0)
    if after:
        conn.execute(after)
    return spent


def storage_parts(conn, storage: str) -> tuple[str, list[tuple[str, str, str]]]:
    """The storage query's FROM clause and its (alias, cast type, column) per stored column,
    read from the view's definition."""
    definition = conn.execute("SELECT pg_get_viewdef(%s::regclass)", (storage,)).fetchone()[0]
    body = definition[definition.index("SELECT", definition.index(")") + 1):]
    select, rest = body.split(" FROM ", 1) if " FROM " in body else body.split("\n   FROM ", 1)
    columns = re.findall(r"\(?x\.(\w+)\)?::([^,]+?) AS (\w+)", select)
    return "FROM " + rest.rstrip().rstrip(";"), columns


def measure(conn, n: int) -> list[list]:
    if not load_synthetic(conn, n):
        return []
    release = conn.execute(
        "SELECT anon.mondrian_view('synthetic', k => 10, quasi_identifiers => %s, "
        "sensitive => ARRAY['diagnosis'], replace => true)", (QIS,)).fetchone()[0]
    schema, storage_name = conn.execute(
        "SELECT release_schema, parameters ->> 'storage' FROM anon.releases "
        "WHERE format('%%I.%%I', release_schema, release_name) = %s", (release,)).fetchone()
    storage = f'"{schema}"."{storage_name}"'
    from_clause, columns = storage_parts(conn, storage)
    release_id = int(RUN_CALL.search(from_clause).group(1))
    conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    conn.execute(f"CREATE SCHEMA {SCHEMA}")
    conn.execute(f"CREATE TABLE {SCHEMA}.saved AS "
                 f"SELECT * FROM anon._mondrian_partition_slices_py({release_id})")
    conn.execute(SLICES_FUNCTION)
    conn.execute(WRAPPER_FUNCTION)
    conn.execute(BUILT_FUNCTION)
    conn.execute(f"SELECT count(*) FROM {SCHEMA}.slices({release_id}, true)").fetchall()
    slices = conn.execute(f"SELECT count(*), sum(octet_length(array_to_string(literals, ''))) "
                          f"FROM {SCHEMA}.saved").fetchone()
    classes, stored_mb = conn.execute(
        f"SELECT count(*), pg_total_relation_size(%s::regclass) / 1048576.0 FROM {storage}",
        (storage,)).fetchone()
    print(f"{n:,} rows: {classes:,} classes in {slices[0]} slice(s), {slices[1] / 2**20:.1f} MiB "
          f"of packed literals, storage {stored_mb:.1f} MiB; stored columns "
          + ", ".join(f"{c} ({a}::{t})" for a, t, c in columns), flush=True)
    direct = RUN_CALL.sub(f"{SCHEMA}.slices(\\1)", from_clause)
    wrapped = RUN_CALL.sub(f"{SCHEMA}.wrapped(\\1)", from_clause)
    pid = conn.info.backend_pid
    cpu0 = backend_cpu(pid)
    conn.execute("CREATE TABLE synthetic_copy AS SELECT * FROM synthetic")
    copy_cpu = backend_cpu(pid) - cpu0
    conn.execute("DROP TABLE synthetic_copy")
    cast_list = ", ".join(f"count(x.{a}::{t})" for a, t, _ in columns)
    stored = ", ".join(f"x.{a}::{t} AS {c}" for a, t, c in columns)
    steps = [("slices", f"SELECT count(*) FROM {SCHEMA}.slices({release_id}) AS run", None),
             ("wrapper", f"SELECT count(*) FROM {SCHEMA}.wrapped({release_id}) AS run", None),
             ("split", f"SELECT count(*) {direct}", None)]
    steps += [(f"cast {c}", f"SELECT count(x.{a}::{t}) {direct}", None) for a, t, c in columns]
    steps += [(f"split {c}", (f"SELECT count(pg_catalog.string_to_array(pg_catalog.substr(x.{a}, "
                              f"2, pg_catalog.length(x.{a}) - 2), ',')) {direct}"), None)
              for a, t, c in columns if t.startswith("text[]")]
    steps += [("all casts", f"SELECT {cast_list} {direct}", None),
              ("write", f"CREATE TABLE {SCHEMA}.written AS SELECT {stored} {direct}",
               f"DROP TABLE {SCHEMA}.written"),
              ("refresh", f"REFRESH MATERIALIZED VIEW {SCHEMA}.refreshed", None),
              ("query", f"CREATE TABLE {SCHEMA}.written AS SELECT {stored} {wrapped}",
               f"DROP TABLE {SCHEMA}.written"),
              ("run", f"SELECT count(*) FROM anon._mondrian_partition_slices({release_id})", None),
              ("run and query", f"CREATE TABLE {SCHEMA}.written AS SELECT {stored} {from_clause}",
               f"DROP TABLE {SCHEMA}.written")]
    rows, split, whole_run = [], None, None
    conn.execute(f"CREATE MATERIALIZED VIEW {SCHEMA}.refreshed AS SELECT {stored} {direct} "
                 "WITH NO DATA")
    built = min(conn.execute(f"SELECT {SCHEMA}.slices_built({release_id})").fetchone()[0]
                for _ in range(repeats()))
    print(f"{n:,} rows: slices built: process CPU {built:.3f} s = {built / copy_cpu:.2f} copies"
          f"; load {load()}", flush=True)
    rows.append([f"{n:,}", "slices built", f"{built:.3f}", f"{built / copy_cpu:.2f}", load()])
    for name, statement, after in steps:
        spent = cpu_of(conn, statement, after)
        split = spent if name == "split" else split
        whole_run = spent if name == "run" else whole_run
        own = spent - split if name.startswith(("cast", "split ")) and split is not None else \
            spent - whole_run if name == "run and query" else None
        print(f"{n:,} rows: {name}: backend CPU {spent:.3f} s = {spent / copy_cpu:.2f} copies"
              + (f" ({own:.3f} s beyond the {'run' if name == 'run and query' else 'split'})"
                 if own is not None else "")
              + f"; load {load()}", flush=True)
        rows.append([f"{n:,}", name, f"{spent:.3f}", f"{spent / copy_cpu:.2f}", load()])
    for name, statement, after in steps[-2:]:
        name = f"{name} in a new backend"
        spent, system = min(fresh_cpu(conn, statement, after) for _ in range(repeats()))
        whole_run = spent if name.startswith("run in") else whole_run
        own = spent - whole_run if name.startswith("run and") else None
        print(f"{n:,} rows: {name}: backend CPU {spent:.3f} s = {spent / copy_cpu:.2f} copies"
              + (f" ({own:.3f} s beyond the run)" if own is not None else "")
              + f", system {system:.3f} s; load {load()}", flush=True)
        rows.append([f"{n:,}", name, f"{spent:.3f}", f"{spent / copy_cpu:.2f}", load()])
    conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    conn.execute(f"SELECT anon.drop_release('{release}')")
    return rows


def main() -> None:
    sizes = [int(x) for x in os.environ.get("PLPY_ANON_STORAGE_ROWS", "1000000").split(",")]
    with extension_db() as conn:
        rows = [r for n in sizes for r in measure(conn, n)]
    table = markdown_table(["rows", "step", "backend CPU s", "copies", "load"], rows)
    text = f"## The default build's storage SQL, step by step (backend CPU)\n\n{table}\n"
    print(text)
    (results_dir() / "storage.md").write_text(text)


if __name__ == "__main__":
    main()
