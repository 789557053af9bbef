"""layout => 'compact': a Mondrian release stored as one row per class, read through a view of one
row per person. Every property is checked from what analysts read (the view), with SQL of the
tests' own; the storage is checked to be what the issue asks (smaller, not granted)."""
from __future__ import annotations

import itertools
import threading

import psycopg
import pytest
from psycopg import sql

from tests.helpers import (
    class_sizes,
    create_release,
    distinct_sensitive_per_class,
    release_columns,
    release_schema_of,
)
from tests.waits import wait_until, wait_until_blocked, waits_for_lock_or_retries

# token: a unique sensitive value per person, released as is, so each released row can be joined
# back to its source row and its ranges and sets checked against the true values
PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, sex text, zip text, income numeric,
                     seen timestamptz, diagnosis text, token int);
INSERT INTO people
SELECT i, CASE WHEN i % 17 = 0 THEN NULL ELSE 18 + (i * 37) % 70 END,
       CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END, (53700 + (i * 13) % 40)::text,
       CASE WHEN i = 7 THEN 'NaN' WHEN i = 8 THEN 12345678901234567890.123 ELSE (i * 7919) % 100000 / 7.0 END,
       TIMESTAMPTZ '2024-01-01 00:00:00.000001+00' + make_interval(secs => (i * 7) % 50000),
       CASE WHEN i % 11 = 0 THEN NULL ELSE (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'gout'])[1 + (i * 7) % 5] END,
       i * 3
FROM generate_series(1, 1200) i;
"""
QIS = ["age", "sex", "zip", "income", "seen"]
_roles = itertools.count()


def mondrian(db, schema, table="people", **kwargs) -> str:
    return create_release(db, "mondrian_view", schema, table, **kwargs)


@pytest.fixture
def people(db, schema):
    db.execute(PEOPLE)
    return "people"


def compact(db, schema, **kwargs) -> str:
    return mondrian(db, schema, k=5, quasi_identifiers=QIS, sensitive=["diagnosis", "token"],
                    identifiers=["id"], layout="compact", **kwargs)


def relkind(db, relation: str) -> str | None:
    row = db.execute("SELECT relkind::text FROM pg_class WHERE oid = to_regclass(%s)", (relation,)).fetchone()
    return row[0] if row else None


def released_rows_hold_their_people(db, release: str) -> None:
    """Each released row joined to its source row (by the unique token): every range holds the
    true value (NULL: any range), every set holds it, and the sensitive values are the person's."""
    bad = db.execute(f"""
        SELECT count(*) FROM {release} r JOIN people p ON p.token = r.token
        WHERE NOT ((p.age IS NULL OR r.age @> p.age) AND p.sex = ANY(r.sex) AND p.zip = ANY(r.zip)
                   AND (p.income IS NULL OR r.income @> p.income) AND r.seen @> p.seen
                   AND r.diagnosis IS NOT DISTINCT FROM p.diagnosis)""").fetchone()[0]
    assert bad == 0
    joined = db.execute(f"SELECT count(*) FROM {release} r JOIN people p ON p.token = r.token").fetchone()[0]
    assert joined == db.execute("SELECT count(*) FROM people").fetchone()[0]


def test_compact_release_reads_like_a_flat_one(db, schema, people):
    release = compact(db, schema)
    flat = mondrian(db, schema, k=5, quasi_identifiers=QIS, sensitive=["diagnosis", "token"],
                    identifiers=["id"], release_name="flat", layout="flat")
    assert relkind(db, release) == "v" and relkind(db, f"{release}_classes") == "m"
    # the same columns, names, order and types (a flat release's are the reference)
    assert release_columns(db, release) == release_columns(db, flat)
    sizes = class_sizes(db, release, QIS)
    assert min(sizes) >= 5 and sum(sizes) == 1200
    released_rows_hold_their_people(db, release)
    # analysts' filters read as on a flat release
    assert db.execute(f"SELECT count(*) FROM {release} WHERE 'F' = ANY(sex)").fetchone()[0] == 400
    assert db.execute(f"SELECT count(*) FROM {release} WHERE age @> 42").fetchone()[0] >= \
        db.execute("SELECT count(*) FROM people WHERE age = 42").fetchone()[0]
    row = db.execute("SELECT row_count, achieved_k, verified, verification, parameters "
                     "FROM anon.releases WHERE release_name = 'people_k5'").fetchone()
    assert row[0] == 1200 and row[1] >= 5 and row[2]
    assert row[3]["rows_released"] == 1200 and row[3]["smallest_class"] == min(sizes)
    assert row[3]["classes"] == len(sizes)
    assert row[4]["layout"] == "compact" and row[4]["storage"] == "people_k5_classes"


def test_l_diversity_holds_on_the_view(db, schema, people):
    release = mondrian(db, schema, k=4, l=3, quasi_identifiers=QIS, sensitive=["diagnosis"],
                       identifiers=["id", "token"], layout="compact")
    assert min(distinct_sensitive_per_class(db, release, QIS, "diagnosis")) >= 3
    l_by_column = db.execute("SELECT verification -> 'l_by_column' ->> 'diagnosis' FROM anon.releases "
                             "WHERE release_name = 'people_k4_l3'").fetchone()[0]
    assert int(l_by_column) == min(distinct_sensitive_per_class(db, release, QIS, "diagnosis"))


def test_storage_is_smaller_than_a_flat_release(db, schema, people):
    release = compact(db, schema)
    flat = mondrian(db, schema, k=5, quasi_identifiers=QIS, sensitive=["diagnosis", "token"],
                    identifiers=["id"], release_name="flat", layout="flat")
    sizes = db.execute("SELECT pg_relation_size(%s), pg_relation_size(%s)",
                       (f"{release}_classes", flat)).fetchone()
    assert sizes[0] < sizes[1] / 2


def test_without_sensitive_columns_rows_repeat_their_class(db, schema, people):
    release = mondrian(db, schema, k=5, quasi_identifiers=QIS, identifiers=["id", "token"],
                       sensitive=[], layout="compact", release_name="nosens")
    assert [c for c, _ in release_columns(db, release)] == QIS
    sizes = class_sizes(db, release, QIS)
    assert min(sizes) >= 5 and sum(sizes) == 1200
    stored = db.execute(f"SELECT sum(_rows), min(_rows) FROM {release}_classes").fetchone()
    assert stored == (1200, min(sizes))


def test_several_sensitive_columns_stay_paired(db, schema, people):
    release = compact(db, schema)
    released = db.execute(f"SELECT diagnosis, token FROM {release} ORDER BY token").fetchall()
    source = db.execute("SELECT diagnosis, token FROM people ORDER BY token").fetchall()
    assert released == source


def test_analyst_reads_the_view_not_the_storage(db, schema, people, connect):
    release = compact(db, schema)
    analyst = f"compact_analyst_{next(_roles)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(analyst)))
    try:
        db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
        db.execute("SELECT anon.refresh(%s)", (release,))       # grants survive the swap
        with connect(user=analyst) as conn:
            assert conn.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 1200
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"SELECT count(*) FROM {release}_classes")
            conn.rollback()
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SELECT count(*) FROM {}.people").format(sql.Identifier(schema)))
    finally:
        db.execute("DELETE FROM anon.analysts WHERE role_name = %s", (analyst,))
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(analyst)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(analyst)))


def test_refreshes(db, schema, people):
    release = compact(db, schema)
    db.execute(f"COMMENT ON VIEW {release} IS 'for the board'")
    db.execute("INSERT INTO people SELECT i, 30, 'F', '53701', 10, now(), 'flu', i * 3 "
               "FROM generate_series(1201, 1210) i")
    row = db.execute("SELECT (anon.refresh(%s)).row_count", (release,)).fetchone()
    assert row[0] == 1210
    assert sum(class_sizes(db, release, QIS)) == 1210
    assert db.execute("SELECT obj_description(%s::regclass)", (release,)).fetchone()[0] == "for the board"
    released_rows_hold_their_people(db, release)
    # a plain REFRESH of the storage is checked and recorded like anon.refresh
    db.execute("DELETE FROM people WHERE id > 1200")
    before = db.execute("SELECT refreshed_at FROM anon.releases WHERE release_name = 'people_k5'").fetchone()[0]
    db.execute(f"REFRESH MATERIALIZED VIEW {release}_classes")
    after = db.execute("SELECT refreshed_at, row_count, verified FROM anon.releases "
                       "WHERE release_name = 'people_k5'").fetchone()
    assert after[0] > before and after[1] == 1200 and after[2]
    assert sum(class_sizes(db, release, QIS)) == 1200
    # the release itself is a view: PostgreSQL refuses to REFRESH it
    with pytest.raises(psycopg.errors.WrongObjectType):
        db.execute(f"REFRESH MATERIALIZED VIEW {release}")


def test_a_plain_refresh_that_breaks_k_keeps_the_old_rows(db, schema, people):
    release = compact(db, schema)
    db.execute("DELETE FROM people WHERE id > 3")
    with pytest.raises(psycopg.Error) as info:
        db.execute(f"REFRESH MATERIALIZED VIEW {release}_classes")
    assert "plpy." not in info.value.diag.message_primary
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 1200


def test_a_redefined_view_is_refused(db, schema, people):
    release = compact(db, schema)
    db.execute(f"CREATE OR REPLACE VIEW {release} AS SELECT age, sex, zip, income, seen, "
               f"'x'::text AS diagnosis, 0 AS token FROM {release}_classes")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="changed outside plpy_anon"):
        db.execute("SELECT anon.refresh(%s)", (release,))


def test_a_view_reading_the_source_is_refused_even_without_digests(db, schema, people):
    """A review: the owner redefined the view to read the source row by row and cleared the
    recorded digests (its own catalog row allows that); the refresh counted the storage's classes
    and recorded k = 5 while analysts read k = 1. The view is compared with plpy_anon's query."""
    release = compact(db, schema)
    db.execute(f'CREATE OR REPLACE VIEW {release} AS SELECT int4range(p.age, p.age, \'[]\') AS age, '
               f'ARRAY[p.sex] AS sex, ARRAY[p.zip] AS zip, numrange(p.income, p.income, \'[]\') AS income, '
               f'tstzrange(p.seen, p.seen, \'[]\') AS seen, p.diagnosis, p.token FROM "{schema}".people p')
    db.execute("UPDATE anon.releases SET definitions = NULL WHERE release_name = 'people_k5'")
    for statement in (f"SELECT anon.refresh('{release}')", f"REFRESH MATERIALIZED VIEW {release}_classes"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="not the query plpy_anon wrote"):
            db.execute(statement)
    # nor copied into a snapshot whose metadata would be the storage's check
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="not the query plpy_anon wrote"):
        db.execute("SELECT anon.snapshot(%s, 'copied')", (release,))
    # a report on the view counts what the view shows, not the storage's classes
    report = dict(db.execute("SELECT measure, value FROM anon.risk_report(%s) WHERE column_name IS NULL",
                             (release,)).fetchall())
    assert report["smallest_class"] == 1 and report["classes"] == 1200


def test_a_long_name_gets_a_storage_name_that_fits(db, schema):
    table = "t" * 58
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, age int, dx text)")
    db.execute(f"INSERT INTO {table} SELECT g, 20 + g % 40, 'd' || g % 3 FROM generate_series(1, 100) g")
    release = mondrian(db, schema, table=table, k=5, quasi_identifiers=["age"], sensitive=["dx"])
    storage = db.execute("SELECT parameters ->> 'storage' FROM anon.releases WHERE release_name = %s",
                         (f"{table}_k5",)).fetchone()[0]
    assert len(storage.encode()) == 63 and storage.endswith("_classes")
    assert sum(class_sizes(db, release, ["age"])) == 100


def test_plain_refresh_and_drop_do_not_deadlock(db, schema, people, connect):
    """A review: a plain REFRESH of the storage (its check then reads the view) and a drop (view,
    then storage) waiting behind a reader deadlocked every time. The drop takes both locks in
    bounded attempts now: the REFRESH finishes, then the drop."""
    release = compact(db, schema)
    with connect() as reader, connect() as refresher, connect() as dropper:
        reader.execute("BEGIN")
        reader.execute(f"SELECT count(*) FROM {release}_classes").fetchone()
        results = {}

        def run(name, conn, statement):
            try:
                conn.execute(statement)
                results[name] = "ok"
            except psycopg.Error as exc:
                results[name] = exc.sqlstate

        a = threading.Thread(target=run, args=("refresh", refresher, f"REFRESH MATERIALIZED VIEW {release}_classes"))
        a.start()
        wait_until_blocked(db, refresher.info.backend_pid, "the REFRESH waiting behind the reader")
        b = threading.Thread(target=run, args=("drop", dropper, f"SELECT anon.drop_release('{release}')"))
        b.start()
        wait_until(lambda: waits_for_lock_or_retries(db, dropper.info.backend_pid),
                   "the drop waiting for its locks")
        reader.execute("COMMIT")
        a.join(60)
        b.join(60)
    assert results == {"refresh": "ok", "drop": "ok"}
    assert db.execute("SELECT to_regclass(%s), to_regclass(%s)", (release, f"{release}_classes")).fetchone() == (None, None)


def test_replace_and_drop_leave_nothing(db, schema, people):
    release = compact(db, schema)
    rel_schema = release_schema_of(schema)
    names = "SELECT relname::text FROM pg_class WHERE relnamespace = %s::regnamespace AND relkind IN ('v', 'm') ORDER BY 1"
    assert [r[0] for r in db.execute(names, (rel_schema,))] == ["people_k5", "people_k5_classes"]
    mondrian(db, schema, k=5, quasi_identifiers=QIS, sensitive=["diagnosis", "token"],
             identifiers=["id"], replace=True, layout="flat")       # flat now
    assert [r[0] for r in db.execute(names, (rel_schema,))] == ["people_k5"]
    assert relkind(db, release) == "m"
    compact(db, schema, replace=True)                               # compact again
    assert [r[0] for r in db.execute(names, (rel_schema,))] == ["people_k5", "people_k5_classes"]
    db.execute("SELECT anon.drop_release(%s)", (release,))
    assert db.execute(names, (rel_schema,)).fetchall() == []


@pytest.mark.parametrize("column, kind", [("tags", "text[]"), ("doc", "json")])
def test_unstorable_sensitive_columns_are_refused(db, schema, people, column, kind):
    db.execute(f"ALTER TABLE people ADD COLUMN {column} {kind}")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="layout => 'flat'"):
        mondrian(db, schema, k=5, quasi_identifiers=QIS, sensitive=["diagnosis", column],
                 identifiers=["id", "token"], layout="compact")
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == 0


def test_a_taken_storage_name_is_refused(db, schema, people):
    rel_schema = release_schema_of(schema)
    mondrian(db, schema, k=5, quasi_identifiers=QIS, identifiers=["id", "token"],
             sensitive=["diagnosis"], release_name="people_k5_classes")
    with pytest.raises(psycopg.errors.DuplicateObject, match="people_k5_classes"):
        compact(db, schema)
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (rel_schema,)).fetchone()[0] == 1


def test_a_bad_layout_is_refused(db, schema, people):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="layout must be one of flat, compact"):
        mondrian(db, schema, k=5, quasi_identifiers=QIS, layout="columnar")


def test_prioritized_mondrian_has_the_layout_too(db, schema, people):
    release = mondrian(db, schema, k=5, quasi_identifiers=QIS, sensitive=["diagnosis", "token"],
                       identifiers=["id"], priorities='{"age": 1, "sex": 0.2}', layout="compact")
    assert relkind(db, release) == "v"
    sizes = class_sizes(db, release, QIS)
    assert min(sizes) >= 5 and sum(sizes) == 1200
    released_rows_hold_their_people(db, release)


def test_a_dropped_view_fails_a_plain_refresh_cleanly(db, schema, people):
    release = compact(db, schema)
    db.execute(f"DROP VIEW {release}")
    with pytest.raises(psycopg.errors.UndefinedObject, match="view no longer exists") as info:
        db.execute(f"REFRESH MATERIALIZED VIEW {release}_classes")
    assert "plpy." not in info.value.diag.message_primary
    assert db.execute(f"SELECT count(*) FROM {release}_classes").fetchone()[0] > 0   # old rows


def test_a_name_a_refresh_would_give_its_new_relation_is_refused(db, schema, people):
    """A review: a release named <storage>__refresh<id> was dropped by the other release's refresh,
    which took it for its own leftover."""
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="ends like the name a refresh"):
        mondrian(db, schema, k=5, quasi_identifiers=QIS, release_name="people_k5_classes__refresh7")


def test_the_check_hashes_each_ranking_once_not_each_class(schema, people, connect):
    """The class pass over grouped classes (a table's risk report) looks each class's values up
    in its column's ranking: the ranking must be the hashed side of that join (hashed once, kept
    across the classes' rescans), not each class's values hashed and the whole ranking scanned
    per class, which grew with classes times distinct values (token: one value per person). A
    compact release's check reads its stored classes in one scan: no value is unnested or
    hashed in SQL."""
    plans = []
    with connect() as conn:
        conn.add_notice_handler(lambda d: plans.append(d.message_primary))
        conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                        "SET auto_explain.log_nested_statements = on",
                        "SET auto_explain.log_level = notice"):
            conn.execute(setting)
        compact(conn, schema)                            # its stored classes
        conn.execute("SELECT * FROM anon.risk_report('people', quasi_identifiers => %s, "
                     "sensitive => ARRAY['diagnosis', 'token'])", (QIS,)).fetchall()   # grouped
    stored = [p for p in plans if "array_to_string" in p and "Query Text: SELECT" in p]
    assert len(stored) == 1, "the stored classes' pass was not logged"
    nodes = [line.strip() for line in stored[0].splitlines() if "->" in line or "Scan" in line]
    # one scan of the storage (a range of its blocks: the last range open-ended) under the
    # aggregate packing its classes
    assert len(nodes) == 1 and nodes[0].removeprefix("->  ").startswith(
        ("Seq Scan on people_k5_classes", "Tid Range Scan on people_k5_classes")), stored[0]
    passes = [p for p in plans if "ranked0 AS MATERIALIZED" in p and "Query Text: WITH" in p]
    assert len(passes) >= 1, "the class passes' plans were not logged"
    for plan in passes:
        lines = [line.strip() for line in plan.splitlines()]
        hashed = [lines[i + 1] for i, line in enumerate(lines[:-1]) if line.startswith("->  Hash  (")]
        for i in range(2):                               # diagnosis, token
            assert any(h.startswith(f"->  CTE Scan on ranked{i} ") for h in hashed), plan
