"""Adversarial: the stable mode follows people by their identifiers' texts, hashed. A refresh run
from a session whose TimeZone and DateStyle differ from the create's (a pg_cron job, another
client) prints a timestamptz or date identifier otherwise; had the hashes followed the print,
every person would leave and join again, and the versions be intersected as strangers'. The
identifiers here are timestamptz and dates, +-infinity among them."""
from __future__ import annotations

import pytest

from tests.helpers import create_release

IDENTIFIERS = {
    "timestamptz": "timestamptz '2020-01-01 00:00+00' + i * interval '1 hour'",
    "date": "CASE i WHEN 1 THEN date 'infinity' WHEN 2 THEN date '-infinity' "
            "ELSE date '2000-01-01' + i END",
}


@pytest.mark.parametrize("kind", IDENTIFIERS)
def test_people_are_followed_whatever_the_refreshing_sessions_time_zone_and_date_style(
        db, schema, kind):
    db.execute("SET TimeZone = 'UTC'")
    db.execute(f"CREATE TABLE pt (id {kind} PRIMARY KEY, age int, zip int, dx text)")
    db.execute(f"INSERT INTO pt SELECT {IDENTIFIERS[kind]}, 20 + i % 30, i % 5, "
               "(ARRAY['a', 'b', 'c'])[1 + i % 3] FROM generate_series(1, 200) i")
    rel = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=["age", "zip"],
                         sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    rid = db.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                     "release_name) = %s", (rel,)).fetchone()[0]

    def persons():
        return db.execute("SELECT md5(persons) FROM anon.release_state WHERE release_id = %s",
                          (rid,)).fetchone()[0]

    try:
        db.execute("SELECT anon.refresh(%s)", (rel,))
        before = persons()
        db.execute("SET TimeZone = 'Asia/Tokyo'")
        db.execute("SET DateStyle = 'SQL, DMY'")
        db.execute("SELECT anon.refresh(%s)", (rel,))
        assert persons() == before
    finally:
        db.execute("RESET TimeZone")
        db.execute("RESET DateStyle")
