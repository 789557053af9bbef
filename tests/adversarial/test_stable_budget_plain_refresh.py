"""Adversarial: the refusal of a stable release over plpy_anon.build_memory (54000) reached by
every road a refresh takes once its table has grown over the budget: anon.refresh, a plain
REFRESH MATERIALIZED VIEW (of a flat release, or of a compact release's storage), and a
scheduled refresh by another role whose budget comes from ALTER ROLE ... SET. Each is refused
with 54000 and leaves the published rows, the stable state and the stored versions as they were;
a replace (replace => true), a new history, is created region by region; budgets that are not
sizes (zero, negative, words) are refused (22023), never read as no limit."""
from __future__ import annotations

import uuid

import psycopg
import pytest

from tests.helpers import matview, release_schema_of

ROWS = 3000


def people(db, table, rows=ROWS):
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, a int, b text, s text)")
    db.execute(f"""INSERT INTO {table}
        SELECT i, 18 + (i * 37) % 70, (ARRAY['north', 'south', 'east', 'west'])[1 + (i * 7) % 4],
               (ARRAY['flu', 'hiv', 'cancer', 'asthma'])[1 + (i * 11) % 4]
        FROM generate_series(1, {rows}) i""")


def stable_release(db, schema, table, name, layout="flat"):
    return db.execute("SELECT anon.mondrian_view(%s, k => 10, l => 2, quasi_identifiers => "
                      "ARRAY['a', 'b'], sensitive => ARRAY['s'], refresh_mode => 'stable', "
                      "layout => %s, release_schema => %s, release_name => %s)::text",
                      (table, layout, release_schema_of(schema), name)).fetchone()[0]


def published(db, rel):
    """The release's rows, its stable state and stored versions, as digests."""
    rows = db.execute(f"SELECT md5(string_agg(r::text, '|' ORDER BY r::text)) FROM {rel} r").fetchone()[0]
    rid = db.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                     "release_name) = %s", (rel,)).fetchone()[0]
    state = db.execute("SELECT md5(string_agg(s::text, '|' ORDER BY s::text)) FROM anon.release_state s "
                       "WHERE release_id = %s", (rid,)).fetchone()[0]
    versions = db.execute("SELECT count(*) FROM anon.release_versions WHERE release_id = %s",
                          (rid,)).fetchone()[0]
    return rows, state, versions


def grow(db, table):
    db.execute(f"INSERT INTO {table} SELECT i, 30 + i % 40, 'north', 'flu' "
               f"FROM generate_series({ROWS + 1}, {ROWS + 600}) i")


@pytest.mark.parametrize("layout", ["flat", "compact"])
def test_plain_refresh_of_a_grown_stable_release_over_the_budget_is_refused_and_keeps_it(
        db, schema, layout):
    people(db, "t")
    rel = stable_release(db, schema, "t", f"kept_{layout}", layout)
    before = published(db, rel)
    grow(db, "t")
    db.execute("SET plpy_anon.build_memory = '64kB'")
    try:
        for statement in (f"REFRESH MATERIALIZED VIEW {matview(db, rel)}",
                          f"SELECT anon.refresh('{rel}')"):
            with pytest.raises(psycopg.Error) as refused:
                db.execute(statement)
            assert refused.value.sqlstate == "54000", (statement, str(refused.value))
            assert published(db, rel) == before, statement
    finally:
        db.execute("RESET plpy_anon.build_memory")


def test_scheduled_refresh_by_a_role_whose_budget_is_set_on_the_role_is_refused(db, schema, connect):
    people(db, "t")
    rel = stable_release(db, schema, "t", "scheduled")
    before = published(db, rel)
    grow(db, "t")
    role = f"cron_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
    try:
        db.execute(f"ALTER ROLE {role} SET plpy_anon.build_memory = '64kB'")
        with connect(user=role) as job, pytest.raises(psycopg.Error) as refused:
            job.execute("SELECT anon.refresh(%s)", (rel,))
        assert refused.value.sqlstate == "54000"
        assert published(db, rel) == before
    finally:
        db.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize("value", ["0", "-1", "0kB", "lots", "1 parsec"])
def test_a_budget_that_is_not_a_size_refuses_a_stable_refresh_with_22023(db, schema, value):
    people(db, "t")
    rel = stable_release(db, schema, "t", "odd_budget")
    before = published(db, rel)
    db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (value,))
    try:
        with pytest.raises(psycopg.Error) as refused:
            db.execute("SELECT anon.refresh(%s)", (rel,))
        assert refused.value.sqlstate == "22023", str(refused.value)
        assert published(db, rel) == before
    finally:
        db.execute("RESET plpy_anon.build_memory")


def test_a_stable_replace_over_the_budget_is_created_region_by_region_as_a_new_history(db, schema):
    # a replace is a creation (a new history, not a refresh): built region by region
    people(db, "t")
    rel = stable_release(db, schema, "t", "replaced")
    before = published(db, rel)
    grow(db, "t")
    db.execute("SET plpy_anon.build_memory = '64kB'")
    try:
        db.execute("SELECT anon.mondrian_view('t', k => 10, l => 2, quasi_identifiers => "
                   "ARRAY['a', 'b'], sensitive => ARRAY['s'], refresh_mode => 'stable', "
                   "release_schema => %s, release_name => 'replaced', replace => true)",
                   (release_schema_of(schema),))
    finally:
        db.execute("RESET plpy_anon.build_memory")
    after = published(db, rel)
    assert after[1] != before[1] and after[2] == 1
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == ROWS + 600
    assert db.execute("SELECT metrics -> 'out_of_core' ->> 'stable_regions' FROM anon.releases WHERE "
                      "format('%%I.%%I', release_schema, release_name) = %s", (rel,)).fetchone()[0] == "true"
