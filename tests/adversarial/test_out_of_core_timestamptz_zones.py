"""Adversarial: timestamptz and timestamp QIs crowded around daylight-saving changes, a
microsecond apart, at 4713 BC, 294276 AD and +-infinity, built out of core at 64kB in a session
whose TimeZone has half-hour offsets and DST (America/St_Johns), and in memory. From the
released rows against the source: every row once, each value inside its class's range, classes
of k rows, in both releases."""
from __future__ import annotations

import json

from tests.helpers import class_sizes, release_schema_of

ROWS = 6000
K = 4


def test_out_of_core_time_cuts_in_a_dst_zone_are_truthful(db, schema):
    db.execute("SET TimeZone = 'America/St_Johns'")
    try:
        released_truthfully(db, schema)
    finally:
        db.execute("RESET TimeZone")


def released_truthfully(db, schema):
    db.execute(f"""CREATE TABLE tz AS SELECT g AS id,
        CASE g % 9 WHEN 0 THEN timestamptz 'infinity' WHEN 1 THEN timestamptz '-infinity'
             WHEN 2 THEN NULL WHEN 3 THEN timestamptz '4713-01-01 00:00:00+00 BC'
             WHEN 4 THEN timestamptz '294276-12-31 23:59:59.999999+00'
             ELSE timestamptz '2026-11-01 03:30:00-02:30' + (g % 700) * interval '1 second'
                  + (g % 3) * interval '1 microsecond' END AS tz,
        timestamp '2026-03-08 01:59:59' + (g % 500) * interval '1 microsecond' AS ts,
        g % 211 AS n
        FROM generate_series(1, {ROWS}) g""")
    rels = {}
    for name, budget in (("tz_mem", None), ("tz_ooc", "64kB")):
        if budget:
            db.execute(f"SET plpy_anon.build_memory = '{budget}'")
        try:
            rels[name] = db.execute(
                "SELECT anon.mondrian_view('tz', %s, quasi_identifiers => ARRAY['tz', 'ts', 'n'], "
                "sensitive => ARRAY['id'], release_name => %s, release_schema => %s)",
                (K, name, release_schema_of(schema))).fetchone()[0]
        finally:
            db.execute("RESET plpy_anon.build_memory")
    metrics = db.execute("SELECT metrics FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                         "release_name) = %s", (rels["tz_ooc"],)).fetchone()[0]
    metrics = metrics if isinstance(metrics, dict) else json.loads(metrics)
    assert metrics["out_of_core"]["regions"] > 1
    for rel in rels.values():
        assert db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (
            ROWS, ROWS)
        assert db.execute(f"""SELECT count(*) FROM {rel} r JOIN tz t USING (id) WHERE NOT
            coalesce((t.tz IS NULL OR r.tz @> t.tz) AND r.ts @> t.ts AND r.n @> t.n, false)
            """).fetchone()[0] == 0
        assert min(class_sizes(db, rel, ["tz", "ts", "n"])) >= K
