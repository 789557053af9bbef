"""Adversarial: t-closeness of a numeric sensitive column out of core (a budget of 16kB makes a
table of 2,000 rows go out of core), and its streamed check, against extreme values: NaN and
+-Infinity, 20-digit numerics, int8's limits, classes whose values are all NULL, one distinct
value, two values 1e300 apart, heavy ties. Each released class's ordered-distance EMD to the
released rows' distribution (the m distinct values, in PostgreSQL's order, 1/(m - 1) apart; NULL
rows left out; a class of NULLs only at its distance from no mass) is computed in SQL here from
the released rows; so are entropy and recursive (c, l). The storage analysts read is a
materialized view: no one, its owner included, updates its values."""
from __future__ import annotations

import psycopg
import pytest

from tests.db.test_out_of_core import QIS, budget, catalog, skewed, synthetic, verification
from tests.helpers import class_sizes, release_schema_of

#: per released class (its QIs' text), the ordered EMD of w to the released rows': the largest,
#: the number of distinct values m, the number of classes
WORST_EMD = """
WITH r AS (SELECT ROW({qis})::text AS key, w FROM {rel}),
tv AS (SELECT w, count(*)::float8 AS c, dense_rank() OVER (ORDER BY w) AS j
       FROM r WHERE w IS NOT NULL GROUP BY w),
m AS (SELECT count(*) AS m, sum(c) AS total FROM tv),
cn AS (SELECT key, count(w)::float8 AS n FROM r GROUP BY key),
cc AS (SELECT key, w, count(*)::float8 AS c FROM r WHERE w IS NOT NULL GROUP BY key, w),
grid AS (SELECT cn.key, tv.j,
                CASE WHEN cn.n = 0 THEN 0 ELSE coalesce(cc.c, 0) / cn.n END - tv.c / m.total AS d
         FROM cn CROSS JOIN tv CROSS JOIN m LEFT JOIN cc ON cc.key = cn.key AND cc.w = tv.w),
cum AS (SELECT key, j, sum(d) OVER (PARTITION BY key ORDER BY j) AS s FROM grid)
SELECT max(e), (SELECT m FROM m), count(*)
FROM (SELECT key, coalesce(sum(abs(s)) FILTER (WHERE j < (SELECT m FROM m)), 0)
                  / greatest((SELECT m FROM m) - 1, 1) AS e FROM cum GROUP BY key) x"""

#: w of the table ``synthetic`` made, as an expression of its id and a
VALUES = {
    "NaN and infinities": (
        "float8", ("CASE WHEN id % 29 = 0 THEN 'NaN'::float8 WHEN id % 31 = 0 THEN 'Infinity' "
                  "WHEN id % 37 = 0 THEN '-Infinity' WHEN coalesce(a, 0) < 40 THEN (id * 7) % 25 "
                  "ELSE 10 + (id * 13) % 40 END")),
    "classes of NULLs": ("int", "CASE WHEN coalesce(a, 0) < 30 THEN NULL ELSE (id * 13) % 40 END"),
    "one value": ("int", "CASE WHEN id % 5 = 0 THEN NULL ELSE 7 END"),
    "two values far apart": (
        "float8", ("CASE WHEN coalesce(a, 0) < 40 AND id % 4 > 0 THEN 0 WHEN id % 4 > 0 THEN 1e300 "
                  "ELSE -1e-300 END")),
    "ties and skew": ("int", "CASE WHEN id % 50 = 0 THEN id ELSE 1 END"),
    # distinct values that share a float8
    "20-digit numerics": (
        "numeric", ("12345678901234567890 + CASE WHEN coalesce(a, 0) < 40 THEN (id * 7) % 5 "
                   "ELSE 3 + (id * 13) % 5 END")),
    "int8's limits": (
        "bigint", ("CASE WHEN coalesce(a, 0) < 40 THEN -9223372036854775808 + id % 3 "
                  "ELSE 9223372036854775807 - id % 3 END")),
}


def table(db, values: str) -> None:
    kind, expression = VALUES[values]
    synthetic(db, "src", 2000)
    db.execute(f"ALTER TABLE src ADD COLUMN w {kind}")
    db.execute(f"UPDATE src SET w = ({expression})::{kind}")


def release_t(db, schema, name: str, t: float) -> str:
    return db.execute("SELECT anon.mondrian_view('src', quasi_identifiers => %s, k => 5, t => %s, "
                      "sensitive => ARRAY['w'], release_schema => %s, release_name => %s)",
                      (QIS, t, release_schema_of(schema), name)).fetchone()[0]


@pytest.mark.parametrize("t", [0.15, 0.35])
@pytest.mark.parametrize("values", list(VALUES))
def test_every_class_of_a_numeric_column_out_of_core_is_within_t_by_the_released_rows(
        db, schema, values, t):
    table(db, values)
    with budget(db, "16kB"):
        rel = release_t(db, schema, "ooc", t)
    metrics, verified, row_count, _ = catalog(db, rel)
    assert "out_of_core" in metrics and verified is True and row_count == 2000
    assert min(class_sizes(db, rel, QIS)) >= 5
    worst, _, _ = db.execute(WORST_EMD.format(qis=", ".join(QIS), rel=rel)).fetchone()
    assert worst <= t + 1e-9
    # the check's figure is the one computed here
    figures = verification(db, rel)["models"]["by_column"]["w"]
    assert figures["failing_classes"] == 0
    assert figures["max_emd"] == pytest.approx(worst, abs=1e-6)


@pytest.mark.parametrize("model", [{"l_diversity": "entropy", "l": 2},
                                   {"l_diversity": "recursive", "l": 2, "c": 3}])
def test_entropy_and_recursive_l_out_of_core_hold_by_the_released_rows(db, schema, model):
    skewed(db, "src", 3000)
    arguments = ", ".join(f"{key} => %({key})s" for key in model)
    with budget(db, "256kB"):
        rel = db.execute(f"SELECT anon.mondrian_view('src', quasi_identifiers => %(q)s, k => 3, "
                         f"sensitive => ARRAY['id', 's'], release_schema => %(rs)s, "
                         f"release_name => 'ooc', {arguments})",
                         {"q": QIS, "rs": release_schema_of(schema), **model}).fetchone()[0]
    assert "out_of_core" in catalog(db, rel)[0]
    counts = f"""SELECT ROW({', '.join(QIS)})::text AS key, s, count(*)::float8 AS c,
                        row_number() OVER (PARTITION BY ROW({', '.join(QIS)})::text
                                           ORDER BY count(*) DESC) AS rank
                 FROM {rel} WHERE s IS NOT NULL GROUP BY 1, 2"""
    if model["l_diversity"] == "entropy":
        least = db.execute(f"""SELECT min(h) FROM (SELECT key, -sum(c / total * ln(c / total)) AS h
                               FROM (SELECT key, c, sum(c) OVER (PARTITION BY key) AS total
                                     FROM ({counts}) x) y GROUP BY key) z""").fetchone()[0]
        assert least >= 0.6931471805599453 - 1e-9
        assert verification(db, rel)["models"]["by_column"]["s"]["min_entropy"] == \
            pytest.approx(least, abs=1e-6)
    else:
        failing = db.execute(f"""SELECT count(*) FROM (SELECT key FROM ({counts}) x GROUP BY key
                                 HAVING max(c) FILTER (WHERE rank = 1)
                                        >= 3 * coalesce(sum(c) FILTER (WHERE rank >= 2), 0)) y
                             """).fetchone()[0]
        assert failing == 0


def test_the_storage_of_an_out_of_core_release_cannot_be_updated_by_its_owner(db, schema):
    table(db, "classes of NULLs")
    with budget(db, "16kB"):
        rel = release_t(db, schema, "ooc", 0.35)
    storage = db.execute("SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n "
                         "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'm'",
                         (release_schema_of(schema),)).fetchall()
    assert len(storage) == 1
    with pytest.raises(psycopg.errors.WrongObjectType):
        column = db.execute("SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = "
                            "%s::regclass AND attnum = 1", (storage[0][0],)).fetchone()[0]
        db.execute(f"UPDATE {storage[0][0]} SET {column} = {column}")
    assert catalog(db, rel)[1] is True
