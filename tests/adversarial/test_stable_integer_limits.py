"""Adversarial: the stable check reads the released classes' integer bounds as packed int8s, an
unbounded end as int8's own end. QIs at int4's and int8's limits (whose classes are released
with an unbounded end) and NULL, refreshed with churn that keeps adding people at the limits
and moving others there (each taken by the analyst for a leaver and a joiner). Checked from the
released rows in every version (which may hold back joiners and keep counterfeit rows): classes
of k rows and l distinct values, and no true value pinned by difference of two versions nor by
intersecting the classes that could hold a person in every version."""
from __future__ import annotations

from tests.helpers import (
    class_sizes,
    create_release,
    distinct_sensitive_per_class,
    keep_released_version,
    pinned_by_difference,
)

LIMITS = """SELECT {id}, CASE i % 5 WHEN 0 THEN 2147483647 WHEN 1 THEN -2147483648 WHEN 2 THEN NULL ELSE i END,
    CASE i % 4 WHEN 0 THEN 9223372036854775807 WHEN 1 THEN -9223372036854775808 WHEN 2 THEN NULL ELSE i END,
    (ARRAY['a', 'b', 'c'])[1 + i % 3] FROM generate_series(1, {n}) i"""
QIS = {"age": "range", "zip": "range"}


def test_stable_refreshes_at_integer_limits_keep_k_l_and_pin_no_one(db, schema):
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, zip int8, dx text, epoch int DEFAULT 0)")
    db.execute("INSERT INTO pt " + LIMITS.format(id="i", n=120))
    rel = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=list(QIS),
                         sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    kept, truth = [], {}
    for step in range(5):
        assert min(class_sizes(db, rel, list(QIS))) >= 3
        assert min(distinct_sensitive_per_class(db, rel, list(QIS), "dx")) >= 2
        db.execute("CREATE TEMP TABLE seen AS SELECT id || '#' || epoch AS pk, age, zip, dx FROM pt")
        truth.update(db.execute("SELECT pk, dx FROM seen").fetchall())
        kept.append(keep_released_version(db, rel, "seen", "pk", QIS, "dx"))
        db.execute("DROP TABLE seen")
        db.execute("DELETE FROM pt WHERE id %% 7 = %s", (step,))
        db.execute("INSERT INTO pt " + LIMITS.format(id=f"1000 + i + 100 * {step}", n=12))
        db.execute("UPDATE pt SET age = 2147483647, zip = -9223372036854775808, epoch = epoch + 1 "
                   "WHERE id %% 11 = %s", (step,))
        db.execute("SELECT anon.refresh(%s)", (rel,))
    pins = {}
    for j in range(1, len(kept)):
        for i in range(j):
            pins.update(pinned_by_difference(kept[i], kept[j]))
    candidates: dict = {}
    for version in kept:
        for p, classes in version["people"].items():
            values = {v for n in classes for v in version["classes"][n]}
            candidates[p] = candidates.get(p, values) & values
    assert {p: v for p, v in pins.items() if truth[p] == v} == {}
    assert {p: min(v) for p, v in candidates.items() if len(v) == 1 and truth[p] == min(v)} == {}
