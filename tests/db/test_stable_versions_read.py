"""A stable refresh reads the multisets every earlier version published (anon.release_versions)
with each version's values joined whole (each ended by 0x01, NULL written 0x02), and value by
value where a value is exactly 0x02 or holds 0x01. Whatever the values (the marks themselves,
empty strings, NULL, plain texts), what it reads is each version's stored multiset, compared
with the arrays SQL returns; and the refreshed release keeps k and l in its rows."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from psycopg import sql

from tests.helpers import class_sizes, create_release, distinct_sensitive_per_class

#: per case, the texts the sensitive column cycles through
CASES = {
    "the NULL mark as a value": ["\x02", "a", None, "b", "\x02\x02"],
    "the end mark inside values": ["a\x01b", "\x01", "", "c", None],
    "empty and NULL beside plain texts": ["", None, "x", "y", "z"],
    "plain texts only": ["a", "b", "é", "日本", "c d"],
}

READ = """CREATE FUNCTION {}.versions_read(release text) RETURNS SETOF text LANGUAGE plpython3u AS $$
import json
import numpy as np
from plpy_anon.db import republication
plan = plpy.prepare("SELECT release_id FROM anon.releases "
                    "WHERE format('%I.%I', release_schema, release_name) = $1", ["text"])
release_id = plpy.execute(plan, [release])[0]["release_id"]
people = republication.People([], np.zeros(0, np.int64), np.zeros(0, np.int64), [], False, [])
republication.load_versions(plpy, release_id, people, [])
for version in people.versions:
    totals = version.counts.sum(axis=0)
    yield json.dumps([[people.values[j], int(totals[j])] for j in np.flatnonzero(totals)])
$$"""


@pytest.mark.parametrize("case", list(CASES))
def test_stored_versions_read_back_as_their_multisets_whatever_the_values(db, schema, case):
    texts = CASES[case]
    db.execute("CREATE TABLE pv (id int PRIMARY KEY, age int, dx text)")
    insert = ("INSERT INTO pv SELECT {id}, i %% 17, (%(t)s::text[])[1 + i %% 5] "
              "FROM generate_series(1, {n}) i")
    db.execute(insert.format(id="i", n=90), {"t": texts})
    rel = create_release(db, "mondrian_view", schema, "pv", k=3, l=2, quasi_identifiers=["age"],
                         sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    db.execute(sql.SQL(READ).format(sql.Identifier(schema)))
    for step in range(2):
        db.execute("DELETE FROM pv WHERE id %% 9 = %s", (step,))
        db.execute(insert.format(id=f"1000 + i + 100 * {step}", n=10), {"t": texts})
        db.execute("SELECT anon.refresh(%s)", (rel,))
        assert min(class_sizes(db, rel, ["age"])) >= 3
        assert min(distinct_sensitive_per_class(db, rel, ["age"], "dx")) >= 2
    stored = [Counter(r[0]) for r in db.execute(
        "SELECT v.vals FROM anon.release_versions v JOIN anon.releases r USING (release_id) "
        "WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s ORDER BY v.version",
        (rel,)).fetchall()]
    read = [Counter({value: count for value, count in json.loads(r[0])})
            for r in db.execute(sql.SQL("SELECT {}.versions_read(%s)").format(sql.Identifier(schema)),
                                (rel,)).fetchall()]
    assert len(stored) == 3
    assert read == stored
