"""Adversarial: the stable check reads each released class's text arrays (a set QI's values, the
sensitive values) joined whole, each element ended by 0x01 and NULL written 0x02, and reads them
element by element when an element is 0x02 or holds 0x01. Values that are exactly those marks,
hold them, are empty or NULL, in a set QI and in the sensitive column, in both layouts: every
version is published (the check reads the released multisets as the run built them) with
classes of k rows and l distinct values, checked from the released rows; the newest version stores
the multiset it released, and every released value is one of the table's."""
from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers import class_sizes, create_release, distinct_sensitive_per_class

#: per case, the texts the set QI and the sensitive column cycle through
CASES = {
    "the NULL mark as a value": ["\x02", "a", None, "b", "\x02\x02"],
    "the end mark inside values": ["a\x01b", "\x01", "", "c", None],
    "empty and NULL only beside plain texts": ["", None, "x", "y", "z"],
}


@pytest.mark.parametrize("layout", ["compact", "flat"])
@pytest.mark.parametrize("case", list(CASES))
def test_odd_texts_in_sets_and_sensitive_values_pass_the_stable_check(db, schema, case, layout):
    texts = CASES[case]
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, city text, dx text)")
    insert = ("INSERT INTO pt SELECT {id}, i %% 17, (%(t)s::text[])[1 + i %% 5], "
              "(%(t)s::text[])[1 + (i / 5) %% 5] FROM generate_series(1, {n}) i")
    db.execute(insert.format(id="i", n=90), {"t": texts})
    qis = ["age", "city"]
    rel = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=qis,
                         sensitive=["dx"], identifiers=["id"], refresh_mode="stable", layout=layout)
    for step in range(2):
        db.execute("DELETE FROM pt WHERE id %% 9 = %s", (step,))
        db.execute(insert.format(id=f"1000 + i + 100 * {step}", n=10), {"t": texts})
        db.execute("SELECT anon.refresh(%s)", (rel,))
        assert min(class_sizes(db, rel, qis)) >= 3
        assert min(distinct_sensitive_per_class(db, rel, qis, "dx")) >= 2
    versions = db.execute(
        "SELECT v.vals FROM anon.release_versions v JOIN anon.releases r USING (release_id) "
        "WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s ORDER BY v.version",
        (rel,)).fetchall()
    assert len(versions) == 3
    # the newest version stored the values it released
    released = [r[0] for r in db.execute(f"SELECT dx FROM {rel}").fetchall()]
    assert Counter(versions[-1][0]) == Counter(released)
    # which are values of the table (a NULL kept from an earlier version stays NULL)
    assert set(released) <= set(texts)
