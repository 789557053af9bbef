"""A stable release whose source exceeds plpy_anon.build_memory: created region by region (as a
fresh release of the same table is built out of core), its refresh refused (54000) with a hint
that works; a refused refresh keeps the published version. A tiny budget stands in for a large
table."""
from __future__ import annotations

import re

import psycopg
import pytest

from tests.helpers import budget, class_sizes, distinct_sensitive_per_class, release_schema_of

QIS = ["a", "b"]
ROWS = 3000
#: 3,000 rows of 2 QIs and 1 sensitive column: ~240 kB estimated, so over this budget
TINY = "64kB"


def people(db, table):
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, a int, b text, s text)")
    db.execute(f"""INSERT INTO {table}
        SELECT i, 18 + (i * 37) % 70, (ARRAY['north', 'south', 'east', 'west'])[1 + (i * 7) % 4],
               (ARRAY['flu', 'hiv', 'cancer', 'asthma'])[1 + (i * 11) % 4]
        FROM generate_series(1, {ROWS}) i""")


def mondrian(db, schema, table, name, **kwargs):
    args = "".join(f", {key} => %({key})s" for key in kwargs)
    return db.execute(f"SELECT anon.mondrian_view(%(t)s, k => 10, l => 2, quasi_identifiers => %(q)s, "
                      f"sensitive => ARRAY['s'], release_schema => %(rs)s, release_name => %(n)s"
                      f"{args})::text",
                      {"t": table, "q": QIS, "rs": release_schema_of(schema), "n": name,
                       **kwargs}).fetchone()[0]


def mode_of(db, rel):
    return db.execute("SELECT parameters ->> 'refresh_mode', metrics ? 'out_of_core' FROM "
                      "anon.releases WHERE format('%%I.%%I', release_schema, release_name) = %s",
                      (rel,)).fetchone()


def check_k_l(db, rel, n):
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == n
    assert min(class_sizes(db, rel, QIS)) >= 10
    assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= 2


@pytest.mark.parametrize("mode", [None, "stable"], ids=["default_mode", "stable_mode"])
def test_stable_release_over_the_budget_is_created_region_by_region(db, schema, mode):
    people(db, "t")
    kwargs = {} if mode is None else {"refresh_mode": mode}
    with budget(db, TINY):
        rel = mondrian(db, schema, "t", "over", **kwargs)
    assert mode_of(db, rel) == ("stable", True)
    check_k_l(db, rel, ROWS)


def grow(db):
    db.execute(f"DELETE FROM t WHERE id % 50 = 0; INSERT INTO t SELECT i, 30, 'north', 'flu' "
               f"FROM generate_series({ROWS + 1}, {ROWS + 200}) i")


def test_the_hints_budget_refreshes_the_stable_release(db, schema):
    people(db, "t")
    rel = mondrian(db, schema, "t", "hinted")
    grow(db)
    with budget(db, TINY), pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    error = refused.value
    assert error.sqlstate == "54000"
    assert "refresh_mode => 'stable'" in str(error) and "3,140 rows" in str(error)
    assert "refresh_mode => 'fresh'" in error.diag.message_hint
    suggested = re.search(r"build_memory = '(\d+MB)'", error.diag.message_hint).group(1)
    with budget(db, suggested):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert mode_of(db, rel) == ("stable", False)
    # joiners may be held back: k and l, not every row
    assert min(class_sizes(db, rel, QIS)) >= 10
    assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= 2


def test_fresh_release_at_the_same_budget_is_built_out_of_core(db, schema):
    people(db, "t")
    with budget(db, TINY):
        rel = mondrian(db, schema, "t", "fresh", refresh_mode="fresh")
    assert mode_of(db, rel) == ("fresh", True)
    check_k_l(db, rel, ROWS)


def test_refused_stable_refresh_keeps_the_published_version(db, schema):
    people(db, "t")
    rel = mondrian(db, schema, "t", "kept")
    before = db.execute(f"SELECT count(*), count(*) FILTER (WHERE s = 'flu') FROM {rel}").fetchone()
    grow(db)
    with budget(db, TINY), pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert refused.value.sqlstate == "54000"
    assert db.execute(f"SELECT count(*), count(*) FILTER (WHERE s = 'flu') FROM {rel}").fetchone() == before
    last_error = db.execute("SELECT last_error FROM anon.releases WHERE format('%%I.%%I', "
                            "release_schema, release_name) = %s", (rel,)).fetchone()[0]
    assert "plpy_anon.build_memory" in last_error
    db.execute("SELECT anon.refresh(%s)", (rel,))       # the default budget: refreshed
    assert db.execute("SELECT last_error FROM anon.releases WHERE format('%%I.%%I', "
                      "release_schema, release_name) = %s", (rel,)).fetchone()[0] is None
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] != before[0]
    assert min(class_sizes(db, rel, QIS)) >= 10
