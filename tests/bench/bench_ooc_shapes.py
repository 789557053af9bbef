"""NCP of out-of-core Mondrian releases against in-memory ones on tables of several shapes
(plpy_anon/db/out_of_core.py: the top of the tree from a sample, then each region fitted in
memory), each NCP also computed here from the released rows.

Shapes (PLPY_ANON_SHAPES, default "syn5,syn6,adult"):

* ``syn6``: the synthetic table of bench_mondrian.py at PLPY_ANON_SHAPES_ROWS rows (default
  1,000,000; its data seed PLPY_ANON_SHAPES_SEED, default 0.42): 6 QIs age, zip, sex, segment,
  income, visit, sensitive diagnosis;
* ``syn5``: the same table with age sensitive: 5 QIs, three of them categorical;
* ``wide5``: ``syn5`` whose zip has ~100,000 distinct values (more than ORDER_VALUES: the
  out-of-core path reads its order when the budget holds it, out_of_core.order_values, 64MB
  and above, and cuts it in its type's order below);
* ``skew5``: ``wide5`` whose zip values' frequencies are skewed (a zip's index drawn as
  ``99999 u^4``, ~6 % of the rows on the most frequent) and unrelated to their text order (the
  index times 7919 modulo 99999): where the fit's order and the type's differ most;
* ``adult``, ``adultN``: UCI Adult (30,162 rows; its rows N times), QIs age, workclass,
  education, marital_status, occupation, race, sex, native_country, hours_per_week, sensitive
  income (rows repeated N times form classes of their own for k <= N: NCP 0 both ways).

Per shape and k (PLPY_ANON_SHAPES_K, default "10"), the in-memory release (default budget) and
one out-of-core release per budget (PLPY_ANON_SHAPES_BUDGETS_<shape>, default 64MB and 16MB for
the synthetic table, 2MB and 512kB for Adult, 16MB and 4MB for adultN): NCP from the metrics
and from the rows, classes, regions, verified, and each build's backend VmHWM (MiB, its
release's ``memory_mib``; each build in a fresh backend). Target: within 2 % relative.

``PLPY_ANON_SHAPES_ARGS``: more arguments of every release, SQL (e.g. ``l => 2, l_diversity =>
'entropy', refresh_mode => 'fresh'``: with l and the table's primary key the default is the
stable mode, fitted in memory).

``PLPY_ANON_SHAPES_SHARDED=1``: the out-of-core releases are built from the same rows held by
two other local clusters (split by ``id % 2``), read through a partitioned table of postgres_fdw
foreign tables, so their top cuts are made level by level from the shards' aggregates (the
in-memory release is the local table's).
"""
from __future__ import annotations

import contextlib
import os

import psycopg

from plpy_anon.cluster import ThrowawayCluster
from tests.bench.bench_mondrian import SYNTHETIC
from tests.bench.common import adult, copy_frame, extension_db, markdown_table, results_dir

ROWS = int(os.environ.get("PLPY_ANON_SHAPES_ROWS", "1000000"))
SEED = os.environ.get("PLPY_ANON_SHAPES_SEED", "0.42")
ADULT_QIS = ["age", "workclass", "education", "marital_status", "occupation", "race", "sex",
             "native_country", "hours_per_week"]
EXTRA = os.environ.get("PLPY_ANON_SHAPES_ARGS", "")
BUDGETS = {"syn": "64MB,16MB", "adult": "2MB,512kB", "adultN": "16MB,4MB"}


def load(conn, shape: str):
    """(table, QIs, sensitive column) of ``shape``, made in the database."""
    if shape in ("syn5", "syn6", "wide5", "skew5"):
        conn.execute("DROP TABLE IF EXISTS synthetic CASCADE")
        made = (SYNTHETIC % {"n": ROWS}).replace("setseed(0.42)", f"setseed({float(SEED)})")
        if shape == "wide5":          # zip of ~100,000 distinct values: above ORDER_VALUES
            made = made.replace("(10000 + (random() * 1999)::int)::text", "(100000 + (random() * 99999)::int)::text")
        if shape == "skew5":
            made = made.replace("(10000 + (random() * 1999)::int)::text",
                                "(100000 + (floor(99999 * random() ^ 4)::int * 7919) % 99999)::text")
        conn.execute(made)
        conn.execute("ALTER TABLE synthetic ADD PRIMARY KEY (id)")
        conn.execute("VACUUM ANALYZE synthetic")
        sensitive = "diagnosis" if shape == "syn6" else "age"
        qis = [q for q in ["age", "zip", "sex", "segment", "income", "visit"] if q != sensitive]
        return "synthetic", qis, sensitive
    times = int(shape[len("adult"):] or 1)
    df = adult()[[*ADULT_QIS, "income"]].copy()
    df.insert(0, "id", range(1, len(df) + 1))
    conn.execute("DROP TABLE IF EXISTS adult CASCADE")
    copy_frame(conn, "adult", df, {c: "int" if c in ("id", "age", "hours_per_week") else "text"
                                   for c in df.columns})
    if times > 1:
        columns = ", ".join([*ADULT_QIS, "income"])
        conn.execute(f"INSERT INTO adult SELECT id + r * 100000, {columns} FROM adult, "
                     f"generate_series(1, {times - 1}) r")
    conn.execute("ALTER TABLE adult ADD PRIMARY KEY (id)")
    conn.execute("VACUUM ANALYZE adult")
    return "adult", ADULT_QIS, "income"


@contextlib.contextmanager
def sharded_copy(conn, table: str):
    """``<table>_sharded``: the rows of ``table`` on two throwaway clusters (``id % 2``), read
    through a partitioned table of postgres_fdw foreign tables."""
    columns = ", ".join(f"{name} {kind}" for name, kind in conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (table,)).fetchall())
    conn.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    conn.execute(f"DROP TABLE IF EXISTS {table}_sharded CASCADE")
    conn.execute(f"CREATE TABLE {table}_sharded ({columns}) PARTITION BY LIST ((id % 2))")
    with ThrowawayCluster() as s0, ThrowawayCluster() as s1:
        for i, shard in enumerate((s0, s1)):
            with psycopg.connect(shard.dsn(), autocommit=True) as remote:
                remote.execute(f"CREATE TABLE part ({columns}, PRIMARY KEY (id))")
                with conn.cursor().copy(f"COPY (SELECT * FROM {table} WHERE id % 2 = {i}) TO STDOUT") as out, \
                        remote.cursor().copy("COPY part FROM STDIN") as into:
                    for block in out:
                        into.write(block)
                remote.execute("VACUUM ANALYZE part")
            conn.execute(f"CREATE SERVER shard{i} FOREIGN DATA WRAPPER postgres_fdw "
                         f"OPTIONS (host '{shard.socket_dir}', dbname 'postgres')")
            conn.execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER shard{i} OPTIONS (user 'postgres')")
            conn.execute(f"CREATE FOREIGN TABLE {table}_shard{i} PARTITION OF {table}_sharded "
                         f"FOR VALUES IN ({i}) SERVER shard{i} "
                         f"OPTIONS (schema_name 'public', table_name 'part')")
        try:
            yield f"{table}_sharded"
        finally:
            conn.execute(f"DROP TABLE {table}_sharded CASCADE")
            for i in range(2):
                conn.execute(f"DROP SERVER shard{i} CASCADE")


def build(conn, table, qis, sensitive, k, budget):
    # a fresh backend per build: its VmHWM (the release's memory_mib) is this build's own
    with psycopg.connect(conn.info.dsn, autocommit=True) as fresh:
        fresh.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget or "1GB",))
        release = fresh.execute(
            "SELECT anon.mondrian_view(%s, k => %s, quasi_identifiers => %s, sensitive => "
            f"ARRAY[%s], release_name => %s, replace => true{EXTRA and ', ' + EXTRA})",
            (table, k, qis, sensitive, "ooc" if budget else "mem")).fetchone()[0]
    metrics, verified = conn.execute(
        "SELECT r.metrics, s.verified FROM anon.releases r JOIN anon.release_status() s "
        "ON s.release = format('%%I.%%I', r.release_schema, r.release_name) WHERE s.release = %s",
        (release,)).fetchone()
    return release, metrics, verified


def peak_mib(metrics: dict):
    """The build's backend VmHWM (MiB) after its last phase, from its release's metrics."""
    return max((m.get("peak", 0) for m in (metrics.get("memory_mib") or {}).values()
                if isinstance(m, dict)), default="")


def ncp_from_rows(conn, release, table, qis) -> float:
    """NCP % from the released rows: per QI the mean over rows of its class's spread (a range's
    width over the table's; a set's values less one over the table's distinct values less one),
    averaged over the QIs (the QIs of these tables hold no NULL)."""
    parts = []
    for q in qis:
        kind = conn.execute(f"SELECT pg_typeof({q})::text FROM {release} LIMIT 1").fetchone()[0]
        if kind.endswith("range"):
            # discrete ranges are canonical [lower, upper): the highest value is upper - 1
            high = f"(upper({q}) - 1)" if kind in ("int4range", "int8range", "daterange") else f"upper({q})"
            whole = conn.execute(f"SELECT (max({q}) - min({q}))::float8 FROM {table}").fetchone()[0]
            value = conn.execute(f"SELECT avg(({high} - lower({q}))::float8) / %s FROM {release}",
                                 (whole,)).fetchone()[0]
        else:
            whole = conn.execute(f"SELECT count(DISTINCT {q}) - 1 FROM {table}").fetchone()[0]
            value = conn.execute(f"SELECT avg(cardinality({q}) - 1)::float8 / %s FROM {release}",
                                 (max(whole, 1),)).fetchone()[0]
        parts.append(100 * float(value))
    return sum(parts) / len(parts)


def main() -> None:
    shapes = os.environ.get("PLPY_ANON_SHAPES", "syn5,syn6,adult").split(",")
    ks = [int(k) for k in os.environ.get("PLPY_ANON_SHAPES_K", "10").split(",")]
    rows = []
    with extension_db() as conn:
        for shape in shapes:
            table, qis, sensitive = load(conn, shape)
            sharded = os.environ.get("PLPY_ANON_SHAPES_SHARDED") == "1"
            source = contextlib.ExitStack()
            ooc_table = source.enter_context(sharded_copy(conn, table)) if sharded else table
            key = "syn" if shape.startswith(("syn", "wide", "skew")) else ("adult" if shape == "adult" else "adultN")
            budgets = os.environ.get(f"PLPY_ANON_SHAPES_BUDGETS_{shape}", BUDGETS[key]).split(",")
            for k in ks:
                mem, mem_metrics, mem_ok = build(conn, table, qis, sensitive, k, None)
                mem_rows = ncp_from_rows(conn, mem, table, qis)
                for budget in budgets:
                    ooc, metrics, ok = build(conn, ooc_table, qis, sensitive, k, budget)
                    assert "out_of_core" in metrics, f"{shape} at {budget} was built in memory"
                    ooc_rows = ncp_from_rows(conn, ooc, table, qis)
                    rows.append([shape, f"{conn.execute(f'SELECT count(*) FROM {table}').fetchone()[0]:,}",
                                 len(qis), k, budget, metrics["out_of_core"]["regions"],
                                 round(mem_metrics["ncp_percent"], 4), round(metrics["ncp_percent"], 4),
                                 round(mem_rows, 4), round(ooc_rows, 4),
                                 f"{100 * (ooc_rows - mem_rows) / mem_rows:+.2f}" if mem_rows else "",
                                 mem_metrics["n_classes"], metrics["n_classes"], mem_ok and ok,
                                 peak_mib(mem_metrics), peak_mib(metrics)])
                    print(markdown_table(HEADERS, rows[-1:]), flush=True)
                    conn.execute(f"SELECT anon.drop_release('{ooc}')")
                conn.execute(f"SELECT anon.drop_release('{mem}')")
            source.close()
    text = ("## NCP out of core against in memory, per shape\n\n"
            + markdown_table(HEADERS, rows) + "\n")
    print(text)
    (results_dir() / "ooc_shapes.md").write_text(text)


HEADERS = ["shape", "rows", "QIs", "k", "build_memory", "regions", "NCP % in memory (metrics)",
           "NCP % out of core (metrics)", "NCP % in memory (rows)", "NCP % out of core (rows)",
           "difference % (rows)", "classes in memory", "classes out of core", "both verified",
           "VmHWM MiB in memory", "VmHWM MiB out of core"]


if __name__ == "__main__":
    main()
