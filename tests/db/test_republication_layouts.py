"""The stable check reads a compact release's classes from its storage (one row per class, which
its view unfolds) and a flat release's by grouping the released rows: on the same table and
the same versions both must find the same classes, candidates and linked classes, and both
refuse a version that narrows someone below l."""
from __future__ import annotations

import pytest

from tests.helpers import create_release

PEOPLE = """
CREATE TABLE {t} (id int PRIMARY KEY, age int, birth date, sex text, dx text);
INSERT INTO {t}
SELECT i, 20 + (hashtext('a' || i) & 1023) % 60, DATE '1950-01-01' + (hashtext('b' || i) & 1023) * 7,
       (ARRAY['F', 'M', NULL])[1 + (hashtext('s' || i) & 1023) % 3],
       CASE WHEN i % 97 = 0 THEN NULL ELSE 'dx' || ((hashtext('d' || i) & 1023) % 9) END
FROM generate_series(1, 1500) i;
"""
CHURN = """
DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE id > 200 ORDER BY md5(id::text || '{v}') LIMIT 60);
INSERT INTO {t} SELECT i, 20 + (hashtext('a' || i) & 1023) % 60, DATE '1950-01-01' + (hashtext('b' || i) & 1023) * 7,
       (ARRAY['F', 'M', NULL])[1 + (hashtext('s' || i) & 1023) % 3], 'dx' || ((hashtext('d' || i) & 1023) % 9)
FROM generate_series({v} * 10000, {v} * 10000 + 59) i;
"""
FIGURES = ("people", "seen_before", "most_versions", "fewest_candidates", "disclosed", "below_l",
           "overlapping_classes", "unsafe_differences", "unsafe_unions", "versions_compared")


def figures(db, release: str) -> dict:
    across = db.execute("SELECT verification -> 'across_versions' FROM anon.releases "
                        "WHERE release_schema || '.' || release_name = %s", (release,)).fetchone()[0]
    return {name: across.get(name) for name in FIGURES}


def test_compact_and_flat_releases_are_checked_alike_version_after_version(db, schema):
    releases = {}
    for layout in ("compact", "flat"):
        db.execute(PEOPLE.format(t=f"people_{layout}"))
        releases[layout] = create_release(
            db, "mondrian_view", schema, f"people_{layout}", k=5, l=2,
            quasi_identifiers=["age", "birth", "sex"], sensitive=["dx"], identifiers=["id"],
            refresh_mode="stable", layout=layout)
    assert figures(db, releases["compact"]) == figures(db, releases["flat"])
    for version in (1, 2):
        for layout, release in releases.items():
            db.execute(CHURN.format(t=f"people_{layout}", v=version))
            db.execute("SELECT anon.refresh(%s)", (release,))
        compact, flat = figures(db, releases["compact"]), figures(db, releases["flat"])
        assert compact == flat and compact["versions_compared"] == version
        assert compact["below_l"] == 0 and compact["seen_before"] > 1000


@pytest.mark.parametrize("layout", ["compact", "flat"])
def test_a_version_narrowing_someone_below_l_publishes_no_rows_in_either_layout(db, schema, layout):
    db.execute(PEOPLE.format(t="people"))
    release = create_release(db, "mondrian_view", schema, "people", k=5, l=2,
                             quasi_identifiers=["age", "birth", "sex"], sensitive=["dx"],
                             identifiers=["id"], refresh_mode="stable", layout=layout)
    # every stayer's values replaced by one they never had: each person's candidates across the
    # versions (intersected) would be empty
    db.execute("UPDATE people SET dx = 'other' || (id % 2)")
    db.execute("SELECT anon.refresh(%s)", (release,))
    # no grouping keeps them: a version of no rows, which the check reads as one
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 0
    across = db.execute("SELECT verification->'across_versions' FROM anon.releases "
                        "WHERE release_schema || '.' || release_name = %s", (release,)).fetchone()[0]
    assert across["below_l"] == 0 and across["versions_compared"] == 1
