"""The stable mode against an analyst who subtracts versions: classes whose released ranges
overlap (a person there could be in either) are linked, and so are the classes a person is in
across versions; the values a linked union gained or lost, when all one value and as many as
the people who joined or left it, are theirs (tests.helpers.pinned_by_difference, from the
released rows and the table's membership alone)."""
from __future__ import annotations

import numpy as np
import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import create_release, keep_released_version, pinned_by_difference

QIS = {"age": "range", "zip": "range"}
VALUES = ["flu", "hiv", "cold", "ok", "gout"]


def person(rng, i: int) -> tuple:
    return (i, int(rng.integers(20, 40)), int(rng.integers(0, 12)), VALUES[int(rng.integers(0, len(VALUES)))])


def pinned_over_pairs(versions: list[dict]) -> dict:
    pinned = {}
    for j in range(1, len(versions)):
        for i in range(j):
            pinned.update(pinned_by_difference(versions[i], versions[j]))
    return pinned


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), churn=st.integers(2, 8), refreshes=st.integers(2, 4))
def test_no_pair_of_versions_pins_anyone_from_the_released_rows(db, schema, seed, churn, refreshes):
    rng = np.random.default_rng(seed)
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, zip int, dx text)")
    rows = [person(rng, i) for i in range(60)]
    with db.cursor() as cur:
        cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)", rows)
    release = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=list(QIS),
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    try:
        versions = run_versions(db, release, rng, churn, refreshes)
    finally:
        db.execute("SELECT anon.drop_release(%s)", (release,))
        db.execute("DROP TABLE pt")
    assert pinned_over_pairs(versions) == {}


def run_versions(db, release: str, rng, churn: int, refreshes: int) -> list[dict]:
    """What the analyst keeps of the first version and of each refresh (``churn`` people leave
    and as many join before each)."""
    versions = [keep_released_version(db, release, "pt", "id", QIS, "dx")]
    next_id = 60
    for _ in range(refreshes):
        ids = [r[0] for r in db.execute("SELECT id FROM pt ORDER BY id").fetchall()]
        gone = rng.choice(ids, size=min(churn, len(ids) - 10), replace=False).tolist()
        db.execute("DELETE FROM pt WHERE id = ANY(%s)", (gone,))
        with db.cursor() as cur:
            cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)",
                            [person(rng, next_id + j) for j in range(churn)])
        next_id += churn
        try:
            db.execute("SELECT anon.refresh(%s)", (release,))
        except psycopg.errors.DataException as refused:
            # refused: the published version stays; never for the run and the released rows
            # disagreeing (a fault, whose hint asks for a report)
            assert "Report this" not in (refused.diag.message_hint or ""), refused.diag.message_primary
        versions.append(keep_released_version(db, release, "pt", "id", QIS, "dx"))
    return versions
