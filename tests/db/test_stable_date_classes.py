"""refresh_mode => 'stable' matches each person to the released date ranges that hold them as an
analyst does (``range @> date`` on the released rows), whether the dates are printed as ISO (the
check then ranks them in numpy, as day numbers) or in another DateStyle, and with dates no ISO
text spells (BC, +-infinity, years past 9999), which SQL ranks."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import create_release
from tests.runs import SLOW_RUN

ROWS = 40
ODD_DATES = ["-infinity", "infinity", "0044-03-15 BC", "0001-01-01 BC", "12000-06-30"]


def load_people(db, rng, odd: bool) -> None:
    """ROWS people born over two years of 2000 (a few on one day, NULL some), and with ``odd``
    some on dates no ISO text spells."""
    born = [f"{np.datetime64('1999-06-01') + int(d)}" for d in rng.integers(0, 700, ROWS)]
    born = [b if i % 9 else born[0] for i, b in enumerate(born)]
    if odd:
        for i, day in zip(rng.choice(ROWS, size=len(ODD_DATES), replace=False).tolist(), ODD_DATES):
            born[i] = day
    rows = [(i, None if i % 13 == 5 else born[i], "FM"[int(rng.integers(0, 2))],
             f"dx{int(rng.integers(0, 4))}") for i in range(ROWS)]
    db.execute("CREATE TABLE born_dates (id int PRIMARY KEY, born date, sex text, dx text)")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO born_dates VALUES (%s, %s::date, %s, %s)", rows)


def mismatched_candidates(db, release: str) -> int:
    """People whose remembered candidates are not the values of every released class whose
    ranges and sets hold them (a NULL lies in every range), from the released rows alone."""
    return db.execute("""
        WITH classes AS (
            SELECT born, sex, array_agg(DISTINCT dx) AS dx FROM """ + release + """
            GROUP BY born, sex),
        expected AS (
            SELECT sha256(decode(s.person_salt, 'hex') || convert_to(p.id::text, 'UTF8')) AS person,
                   jsonb_build_object('dx', jsonb_agg(DISTINCT v.dx ORDER BY v.dx)) AS candidates
            FROM born_dates p CROSS JOIN anon.release_secrets s
            JOIN classes c ON (p.born IS NULL OR coalesce(c.born @> p.born, false))
                          AND p.sex = ANY(c.sex)
            CROSS JOIN LATERAL unnest(c.dx) AS v(dx)
            WHERE s.release_id = (SELECT release_id FROM anon.releases
                                  WHERE release_schema || '.' || release_name = %s)
            GROUP BY 1)
        SELECT count(*) FROM expected e FULL JOIN (
            SELECT x.person, x.candidates FROM anon.release_people x JOIN anon.releases r USING (release_id)
            WHERE r.release_schema || '.' || r.release_name = %s) AS x USING (person)
        WHERE x.candidates IS DISTINCT FROM e.candidates""", (release, release)).fetchone()[0]


@pytest.mark.more_examples
@settings(max_examples=20 if SLOW_RUN else 4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), date_style=st.sampled_from(["ISO, MDY", "SQL, DMY"]),
       odd=st.booleans())
def test_people_are_matched_to_the_date_ranges_holding_them(db, schema, seed, date_style, odd):
    load_people(db, np.random.default_rng(seed), odd)
    db.execute("SELECT pg_catalog.set_config('DateStyle', %s, false)", (date_style,))
    try:
        release = create_release(db, "mondrian_view", schema, "born_dates", k=2, l=2,
                                 quasi_identifiers=["born", "sex"], sensitive=["dx"],
                                 identifiers=["id"], refresh_mode="stable",
                                 release_name="born_dates")
        try:
            assert mismatched_candidates(db, release) == 0
        finally:
            db.execute("SELECT anon.drop_release(%s)", (release,))
    finally:
        db.execute("RESET DateStyle")
        db.execute("DROP TABLE born_dates")
