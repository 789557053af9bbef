"""Adversarial probes of anon.release_audit that found nothing, kept so that they would:

- a partitioned source with odd names (quotes, spaces, mixed case in its schema-qualified parent,
  its partitions and its QIs) and extreme values in its QIs (int8's ends, 20-digit numerics, NaN
  and infinities of numeric, float8 and timestamp), in memory and out of core, stable: the
  audit's achieved_k and distinct_l are the smallest class and the fewest distinct sensitive
  values counted in SQL from the released rows, before and after a refresh that adds more;
- another session refreshing or dropping the release while the audit runs: the audit neither
  waits for it nor fails, and shows the committed state."""
from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import sql

from tests.helpers import class_sizes, distinct_sensitive_per_class, release_schema_of
from tests.waits import wait_until

PARENT = 'Pa"rt, Ed'
QIS = ["Big Int", 'Nu"m', "fl oat", "When"]
EXTREMES = [
    (9223372036854775807, "12345678901234567890.123", "NaN", "infinity"),
    (-9223372036854775808, "-12345678901234567890", "Infinity", "-infinity"),
    (0, "Infinity", "-Infinity", "294276-12-31 23:59:59.999999"),
    (1, "-Infinity", "1e308", "4713-01-01 00:00:00 BC"),
    (2, "NaN", "-1e-308", "2020-02-29 12:00:00"),
]


def insert_extremes(db, parent, first_id: int) -> None:
    for i, (big, num, flo, when) in enumerate(EXTREMES * 3):
        db.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s::numeric, %s::float8, %s::timestamp, %s)")
                   .format(parent), (first_id + i, big, num, flo, when, ["flu", "hiv", "ok"][i % 3]))


def audited(db, release: str) -> dict:
    cursor = db.execute("SELECT * FROM anon.release_audit(%s)", (release,))
    return dict(zip([d.name for d in cursor.description], cursor.fetchone()))


def recount(db, release: str) -> tuple[int, int]:
    return (min(class_sizes(db, release, QIS)),
            min(distinct_sensitive_per_class(db, release, QIS, "Dx")))


@pytest.mark.parametrize("memory", [None, "1"], ids=["in memory", "out of core"])
def test_the_audit_of_an_odd_partitioned_release_of_extreme_values_is_its_rows(db, schema, memory):
    parent = sql.Identifier(schema, PARENT)
    big, num, flo, when = (sql.Identifier(c) for c in QIS)
    db.execute(sql.SQL("CREATE TABLE {} (id int8 NOT NULL, {} int8, {} numeric, {} float8, {} timestamp, "
                       "\"Dx\" text) PARTITION BY RANGE (id)").format(parent, big, num, flo, when))
    for i in range(3):
        db.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})").format(
            sql.Identifier(schema, f"{PARENT} P{i}"), parent, sql.Literal(i * 10_000),
            sql.Literal((i + 1) * 10_000)))
    db.execute(sql.SQL("""INSERT INTO {} SELECT g, g * 1000003, g * 1.5, g / 7.0,
        '2020-01-01'::timestamp + g * interval '1 hour', (ARRAY['flu', 'hiv', 'ok', 'asthma'])[1 + g % 4]
        FROM generate_series(1, 600) g""").format(parent))
    insert_extremes(db, parent, 10_000)
    if memory:
        db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
    try:
        release = db.execute(sql.SQL(
            "SELECT anon.mondrian_view({}, k => 4, l => 2, quasi_identifiers => {}, "
            "sensitive => ARRAY['Dx'], identifiers => ARRAY['id'], refresh_mode => 'stable', "
            "release_name => 'Odd \"Rel\" Name', release_schema => {})::text").format(
                sql.Literal(parent.as_string(db)), sql.Literal(QIS),
                sql.Literal(release_schema_of(schema)))).fetchone()[0]
        row = audited(db, release)
        assert row["release"] == release and row["verified"] and row["versions"] == 1
        assert (row["achieved_k"], row["distinct_l"]) == recount(db, release)
        assert row["safe"] is (row["achieved_k"] >= 4 and row["distinct_l"] >= 2), row["why"]
        insert_extremes(db, parent, 20_000)
        db.execute("RESET plpy_anon.build_memory")
        db.execute("SELECT anon.refresh(%s)", (release,))
    finally:
        db.execute("RESET plpy_anon.build_memory")
    row = audited(db, release)
    assert row["verified"] and row["versions"] == 2 and row["last_error"] is None
    assert (row["achieved_k"], row["distinct_l"]) == recount(db, release)
    assert row["held_back"] is not None and row["counterfeit"] is not None


def test_an_audit_neither_waits_for_nor_fails_beside_a_refresh_and_a_drop(db, schema, connect):
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, a int, s text)")
    db.execute("INSERT INTO pt SELECT i, i % 50, (ARRAY['x', 'y', 'z'])[1 + i % 3] FROM generate_series(1, 600) i")
    release = db.execute("SELECT anon.mondrian_view('pt', k => 5, l => 2, quasi_identifiers => ARRAY['a'], "
                         "sensitive => ARRAY['s'], identifiers => ARRAY['id'], refresh_mode => 'fresh', "
                         "release_schema => %s)::text", (release_schema_of(schema),)).fetchone()[0]
    with connect() as writer, connect() as auditor:
        auditor.execute("SET lock_timeout = '2s'")
        writer.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        writer.execute("BEGIN")
        writer.execute("SELECT anon.refresh(%s)", (release,))
        assert audited(auditor, release)["versions"] == 1     # the refresh is not committed
        writer.execute("COMMIT")
        assert audited(auditor, release)["versions"] == 2
        # audits in a loop while another session drops the release: each answers, none waits
        answers, errors = [], []
        done = threading.Event()

        def audit_until_dropped():
            with connect() as c:
                c.execute("SET lock_timeout = '2s'")
                while not done.is_set():
                    try:
                        answers.append([r[0] for r in c.execute("SELECT release FROM anon.release_audit()")])
                    except psycopg.Error as error:   # the error is the finding
                        errors.append(error)
        thread = threading.Thread(target=audit_until_dropped)
        thread.start()
        try:
            # the drop begins once the loop answers (its new backend may start after a quick drop)
            wait_until(lambda: answers or errors or not thread.is_alive(), "the audits' first answer")
            writer.execute("BEGIN")
            writer.execute("SELECT anon.drop_release(%s)", (release,))
            assert release in [r[0] for r in auditor.execute("SELECT release FROM anon.release_audit()")]
            writer.execute("COMMIT")
        finally:
            done.set()
            thread.join(30)
        assert not errors and answers, errors
        assert release not in [r[0] for r in auditor.execute("SELECT release FROM anon.release_audit()")]
        with pytest.raises(psycopg.errors.UndefinedObject):
            auditor.execute("SELECT * FROM anon.release_audit(%s)", (release,))
