"""Adversarial (review of stop 25): the release's row order could be replayed by an analyst.

The Mondrian family and trust releases list each class's rows in a shuffled order, so that the
release keeps no trace of the source's insertion order. The shuffle was seeded with the release
id and the row count: the release id is printed in the release's own view definition
(``anon._mondrian_partition_slices(<id>)``, readable with ``pg_get_viewdef``), the row count is
the release's. An analyst who knows the population's quasi-identifiers and its registration
order replayed numpy's generator, sorted each class's members by their tie-breakers and read off
every person's sensitive value: 2,000 of 2,000 at k = 5, l = 3; a refresh kept the seed.

Now every build draws a fresh seed from the operating system (``generalization.release_order``).
The tests replay the attack exactly as it was made and require it to do no better than chance,
and require a refresh of unchanged data to list the rows in another order.
"""
from __future__ import annotations

import numpy as np
import pytest

DIAGNOSES = "ARRAY['flu', 'HIV', 'cancer', 'asthma', 'diabetes']"


@pytest.fixture
def patients(db, schema):
    # registered in patient_id order: insertion order is physical order, which the release reads
    db.execute("CREATE TABLE patients (patient_id int PRIMARY KEY, age int, zip text, diagnosis text)")
    db.execute(f"""INSERT INTO patients SELECT g, 20 + (g * 7919) % 60, 'z' || (g * 104729) % 12,
                     ({DIAGNOSES})[1 + abs(hashint4(g)) % 5] FROM generate_series(1, 2000) g ORDER BY g""")
    return schema


def replayed_guesses(db, release: str, release_id: int, extra_labels: int = 0) -> tuple[int, int, float]:
    """(correct, total, expected): each released row's sensitive value attributed to the person
    the old seed (release id, row count) put at that place in its class; ``expected`` is how
    many a random order inside each class gets right on average (sum over classes and values
    of count^2 / class size)."""
    rows = db.execute(f"SELECT lower(age), upper(age), zip, diagnosis FROM {release}").fetchall()
    roster = db.execute("SELECT age, zip, diagnosis FROM patients ORDER BY patient_id").fetchall()
    blocks = []                                   # consecutive rows with equal QIs: a class
    for lo, hi, zips, dx in rows:
        # Mondrian releases zip as a value set (text[]), trust as a label (the value or '*')
        key = (lo, hi, tuple(zips) if isinstance(zips, list) else zips)
        if blocks and blocks[-1][0] == key:
            blocks[-1][1].append(dx)
        else:
            blocks.append((key, [dx]))
    rng = np.random.default_rng([release_id, len(rows)])
    rng.permutation(max(len(blocks) + extra_labels, 1))
    tiebreak = rng.integers(0, 1 << 24, len(roster), dtype=np.int64)
    correct = total = 0
    expected = sum(diagnoses.count(v) ** 2 / len(diagnoses) for _, diagnoses in blocks
                   for v in set(diagnoses))
    for (lo, hi, zips), diagnoses in blocks:
        members = sorted((i for i, (age, z, _) in enumerate(roster) if inside(lo, hi, zips, age, z)),
                         key=lambda i: tiebreak[i])
        assert len(members) == len(diagnoses)     # the classes are what the attacker thinks
        for i, dx in zip(members, diagnoses):
            total += 1
            correct += roster[i][2] == dx
    return correct, total, expected


def inside(lo, hi, zips, age, zip_) -> bool:
    in_age = (lo is None or lo <= age) and (hi is None or age < hi)
    return in_age and (zip_ in zips if isinstance(zips, tuple) else zips in ("*", zip_))


def release_id_of(db, release: str) -> int:
    return db.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                      "release_name) = %s", (release,)).fetchone()[0]


def test_a_mondrian_release_order_cannot_be_replayed(db, patients, release_schema):
    release = db.execute("SELECT anon.mondrian_view('patients', k => 5, l => 3, quasi_identifiers => "
                         "'{age,zip}', sensitive => '{diagnosis}', release_schema => %s)",
                         (release_schema,)).fetchone()[0]
    correct, total, expected = replayed_guesses(db, release, release_id_of(db, release))
    assert total == 2000 and expected < 0.5 * total
    # no better than a random order (the replay was right 2,000 times of 2,000); the margin is
    # over 10 standard deviations of the count of chance matches
    assert correct < expected + 0.1 * total, (correct, total, expected)
    before = db.execute(f"SELECT diagnosis FROM {release}").fetchall()
    db.execute("SELECT anon.refresh(%s)", (release,))
    after = db.execute(f"SELECT diagnosis FROM {release}").fetchall()
    assert sorted(before) == sorted(after) and before != after   # same rows, another order


def test_a_trust_release_order_cannot_be_replayed(db, patients, release_schema):
    db.execute("CREATE ROLE release_order_requester")
    db.execute("SELECT anon.add_requester('uni', role => 'release_order_requester')")
    db.execute("""SELECT anon.define_purpose('demo', priorities => '{"age": 1, "zip": 1}'::jsonb)""")
    for _ in range(20):
        db.execute("SELECT anon.record_interaction('uni', 'good')")
    release = db.execute("SELECT anon.trust_view('patients', 'uni', 'demo', k => 5, quasi_identifiers "
                         "=> '{age,zip}', sensitive => '{diagnosis}', release_schema => %s)",
                         (release_schema,)).fetchone()[0]
    try:
        correct, total, expected = replayed_guesses(db, release, release_id_of(db, release),
                                                    extra_labels=1)
        assert total == db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] > 0
        assert expected < 0.5 * total
        assert correct < expected + 0.1 * total, (correct, total, expected)
    finally:
        db.execute("DELETE FROM anon.requesters WHERE role_name = 'release_order_requester'")
        db.execute("DROP OWNED BY release_order_requester")
        db.execute("DROP ROLE release_order_requester")
