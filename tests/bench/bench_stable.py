"""The stable refresh mode against the fresh one, in the same run on the same tables: create, then
a refresh after 1 % of the people left and as many joined; each stable time / the fresh one
beside its target (<= 1.5x), and each release verified from its rows (smallest class >= k,
fewest distinct sensitive values >= l; for the stable release, the fewest candidates any person
keeps across the versions, from anon.release_status). A plain copy of each table is printed
for scale.

Tables (each with a primary key, k = 10, l = 2):

* people: PLPY_ANON_STABLE_PEOPLE rows (default 32,561): birth dates over 80 years, 5-digit
  zip codes (integers: ranges), sex; a diagnosis among 12; name and e-mail beside the id;
* adult: UCI Adult (../shared/data), QIs age, sex, race, education_num, marital_status;
  sensitive occupation;
* synth: the 6-QI shape of the layout benchmarks (tests.bench.bench_production.SYNTH) plus an
  id, PLPY_ANON_STABLE_ROWS rows (default "200000"; "1000000" for the target).

PLPY_ANON_STABLE_TABLES (default "people,adult,synth") picks the tables.
PLPY_ANON_STABLE_CHURN (default 0.01) is the share of people who leave (and as many join) before
the refresh; PLPY_ANON_STABLE_COMEBACKS=1 adds a second refresh where those leavers come back
(their ids and records) and the joiners leave. The stable release's state (anon.release_state:
its rows, people and bytes) is printed after each refresh.
PLPY_ANON_STABLE_DIGEST=1 prints the md5 of each stable release's rows (ordered) after its
creation and after each refresh: a change of speed must publish the same rows.
"""
from __future__ import annotations

import os
import time

from tests.bench.bench_production import SYNTH
from tests.bench.common import (
    adult,
    copy_frame,
    copy_seconds,
    extension_db,
    markdown_table,
    results_dir,
)

K, L, TARGET = 10, 2, 1.5
CHURN = float(os.environ.get("PLPY_ANON_STABLE_CHURN", "0.01"))
COMEBACKS = os.environ.get("PLPY_ANON_STABLE_COMEBACKS") == "1"

PEOPLE = """
SELECT setseed(0.43);
CREATE TABLE people AS
SELECT g AS id, 'person ' || g AS name, 'p' || g || '@example.org' AS email,
       (10000 + floor(random() * 90000))::int AS zip,
       DATE '1940-01-01' + floor(random() * 365.25 * 80)::int AS birth_date,
       (ARRAY['F', 'M'])[1 + floor(random() * 2)::int] AS sex,
       'dx' || floor(random() * 12)::int AS diagnosis
FROM generate_series(1, {n}) g;
"""


def shapes() -> dict[str, dict]:
    people = int(os.environ.get("PLPY_ANON_STABLE_PEOPLE", "32561"))
    rows = int(os.environ.get("PLPY_ANON_STABLE_ROWS", "200000"))
    return {
        "people": {"rows": people, "qis": ["zip", "birth_date", "sex"], "sensitive": "diagnosis",
                   "identifiers": ["id"]},
        "adult": {"rows": None, "qis": ["age", "sex", "race", "education_num", "marital_status"],
                  "sensitive": "occupation", "identifiers": ["id"]},
        "synth": {"rows": rows, "qis": ["a_int", "b_int", "c_int", "d_txt", "e_txt", "f_txt"],
                  "sensitive": "s_txt", "identifiers": ["id"]},
    }


def load(conn, name: str, shape: dict) -> None:
    if name == "people":
        conn.execute(PEOPLE.format(n=shape["rows"]))
    elif name == "adult":
        df = adult()[["age", "sex", "race", "education_num", "marital_status", "occupation"]]
        df.insert(0, "id", range(1, len(df) + 1))
        copy_frame(conn, "adult", df, {"id": "int", "age": "int", "sex": "text", "race": "text",
                                       "education_num": "int", "marital_status": "text",
                                       "occupation": "text"})
    else:
        conn.execute(SYNTH.format(n=shape["rows"]).replace(
            f"CREATE TABLE synth_{shape['rows']} AS SELECT", "CREATE TABLE synth AS SELECT g AS id,"))
    conn.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (id)")
    conn.execute(f"VACUUM ANALYZE {name}")


def churn(conn, name: str) -> None:
    """CHURN of the people leave (kept in <name>_left); as many join (the leavers' values under
    new ids)."""
    columns = [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", (name,))]
    values = ", ".join("g.id + 100000000" if c == "id" else f"g.{c}" for c in columns)
    conn.execute(f"CREATE TABLE {name}_left AS TABLE {name} WITH NO DATA")
    conn.execute(f"SELECT setseed(0.5); WITH g AS (DELETE FROM {name} WHERE random() < {CHURN} "
                 f"RETURNING *), kept AS (INSERT INTO {name}_left SELECT * FROM g) "
                 f"INSERT INTO {name} SELECT {values} FROM g")
    conn.execute(f"ANALYZE {name}")


def digest(conn, release: str, step: str) -> None:
    """The md5 of the release's rows in order (PLPY_ANON_STABLE_DIGEST=1)."""
    if os.environ.get("PLPY_ANON_STABLE_DIGEST") != "1":
        return
    md5, n = conn.execute(f"SELECT md5(string_agg(r::text, E'\\n' ORDER BY r::text)), count(*) "
                          f"FROM {release} r").fetchone()
    print(f"  {release} {step}: {n:,} rows, md5 {md5}", flush=True)


def come_back(conn, name: str) -> None:
    """The leavers of :func:`churn` come back (their ids and records); the joiners leave."""
    conn.execute(f"DELETE FROM {name} WHERE id >= 100000000")
    conn.execute(f"INSERT INTO {name} SELECT * FROM {name}_left")
    conn.execute(f"ANALYZE {name}")


def state_size(conn, release: str) -> str:
    """The stable release's state: its rows, people (absent ones included) and bytes."""
    rows, people, size = conn.execute(
        "SELECT count(*), sum(octet_length(persons) / 32), sum(pg_column_size(s.*)) "
        "FROM anon.release_state s JOIN anon.releases r USING (release_id) "
        "WHERE r.release_schema || '.' || r.release_name = %s", (release,)).fetchone()
    return f"{rows} rows, {people:,} people, {size / 1e6:.1f} MB"


def verified(conn, release: str, shape: dict) -> tuple[int, int]:
    """(smallest class, fewest distinct sensitive values in a class), from the released rows."""
    qis = ", ".join(shape["qis"])
    return conn.execute(
        f"SELECT min(n), min(d) FROM (SELECT count(*) AS n, count(DISTINCT {shape['sensitive']}) AS d "
        f"FROM {release} GROUP BY {qis}) AS c").fetchone()


def measure(conn, name: str, shape: dict) -> list[list]:
    load(conn, name, shape)
    n = conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    copy = copy_seconds(conn, name)
    qis = "ARRAY[" + ", ".join(f"'{q}'" for q in shape["qis"]) + "]"
    created, refreshed, releases = {}, {}, {}
    for mode in ("fresh", "stable"):
        t0 = time.perf_counter()
        releases[mode] = conn.execute(
            f"SELECT anon.mondrian_view('{name}', k => {K}, l => {L}, quasi_identifiers => {qis}, "
            f"sensitive => ARRAY['{shape['sensitive']}'], identifiers => ARRAY{shape['identifiers']}, "
            f"refresh_mode => '{mode}', release_name => '{name}_{mode}')").fetchone()[0]
        created[mode] = time.perf_counter() - t0
    digest(conn, releases["stable"], "created")
    print(f"  {name} stable state after create: {state_size(conn, releases['stable'])}", flush=True)
    steps = [("refresh", churn)] + ([("refresh, comebacks", come_back)] if COMEBACKS else [])
    timings = {"create": created}
    for step, change in steps:
        change(conn, name)
        refreshed = timings[step] = {}
        for mode in ("fresh", "stable"):
            t0 = time.perf_counter()
            conn.execute(f"SELECT anon.refresh('{releases[mode]}')")
            refreshed[mode] = time.perf_counter() - t0
            phases = conn.execute(
                "SELECT phases FROM anon.refresh_history WHERE release_name LIKE %s "
                "ORDER BY refresh_id DESC LIMIT 1", (f"%{name}_{mode}",)).fetchone()
            if phases and phases[0]:
                print(f"  {name} {mode} {step} phases (s): " + ", ".join(
                    f"{p} {s:.2f}" for p, s in sorted(phases[0].items(), key=lambda i: -i[1])),
                    flush=True)
        digest(conn, releases["stable"], step)
        print(f"  {name} stable state after {step}: {state_size(conn, releases['stable'])}",
              flush=True)
    rows = []
    across = conn.execute(
        "SELECT verification -> 'across_versions' FROM anon.release_status() WHERE release = %s",
        (releases["stable"],)).fetchone()[0] or {}
    for step, took in timings.items():
        ratio = took["stable"] / took["fresh"]
        print(f"{name} ({n:,} rows, copy {copy:.2f} s), {step}: stable {took['stable']:.2f} s, fresh "
              f"{took['fresh']:.2f} s = {ratio:.2f}x (target <= {TARGET}x)", flush=True)
        rows.append([f"{name} {n:,}", step, f"{took['stable']:.2f}", f"{took['fresh']:.2f}",
                     f"{ratio:.2f}x", f"{TARGET}x", f"{copy:.2f}"])
    for mode, release in releases.items():
        smallest, fewest = verified(conn, release, shape)
        print(f"  {mode} release verified from its rows: smallest class {smallest} (k = {K}), fewest "
              f"sensitive values in a class {fewest} (l = {L})"
              + (f"; across its versions: fewest candidates {across.get('fewest_candidates')}, "
                 f"people below l {across.get('below_l')}" if mode == "stable" else ""), flush=True)
        assert smallest >= K and fewest >= L, (release, smallest, fewest)
    return rows


def main() -> None:
    wanted = os.environ.get("PLPY_ANON_STABLE_TABLES", "people,adult,synth").split(",")
    rows = []
    with extension_db() as conn:
        # the first release of a backend loads the compiled kernels: paid here, by neither mode
        conn.execute("CREATE TABLE warm_up AS SELECT g AS id, g % 97 AS a, 'v' || g % 5 AS s "
                     "FROM generate_series(1, 2000) g")
        conn.execute("ALTER TABLE warm_up ADD PRIMARY KEY (id)")
        for mode in ("fresh", "stable"):
            conn.execute(f"SELECT anon.mondrian_view('warm_up', k => {K}, l => {L}, "
                         "quasi_identifiers => ARRAY['a'], sensitive => ARRAY['s'], "
                         f"refresh_mode => '{mode}', release_name => 'warm_up_{mode}')")
        for name, shape in shapes().items():
            if name in wanted:
                rows += measure(conn, name, shape)
    table = markdown_table(["table", "step", "stable s", "fresh s", "stable / fresh", "target",
                            "copy s"], rows)
    print(table)
    (results_dir() / "stable.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
