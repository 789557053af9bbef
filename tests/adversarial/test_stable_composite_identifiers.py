"""Adversarial: a stable release followed by a composite primary key whose texts hold the
character the identifier columns are joined by (U+001F, which a PostgreSQL text may hold). Two
rows that the primary key tells apart are two people: the refresh must publish them, not refuse
them as rows that share an identifier."""
from __future__ import annotations

import psycopg

from tests.helpers import class_sizes, create_release, distinct_sensitive_per_class


def refresh_outcome(db, schema, rows: list[tuple]) -> tuple:
    """The refresh's outcome once ``rows`` (a, b, age, dx) joined a stable release over
    (a, b): the released rows' smallest class and fewest distinct values, or the refusal."""
    db.execute("CREATE TABLE pt (a text, b text, age int, dx text, PRIMARY KEY (a, b))")
    db.execute("INSERT INTO pt SELECT 'p' || g, 'q', g, (ARRAY['flu','hiv','cold'])[1 + g % 3] "
               "FROM generate_series(1, 60) g")
    release = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=["age"],
                             sensitive=["dx"], identifiers=["a", "b"], refresh_mode="stable")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)", rows)
    try:
        db.execute("SELECT anon.refresh(%s)", (release,))
    except psycopg.Error as refused:
        return refused.diag.sqlstate, refused.diag.message_primary
    return (min(class_sizes(db, release, ["age"])),
            min(distinct_sensitive_per_class(db, release, ["age"], "dx")))


def test_people_told_apart_by_a_composite_key_with_the_join_character_are_published(db, schema):
    """('x\\x1f', 'y') and ('x', '\\x1fy') are two rows of the primary key; joined by U+001F
    both read 'x\\x1f\\x1fy', one hash: the refresh refuses them (22023, '1 rows share a value
    with another row') and publishes nothing."""
    outcome = refresh_outcome(db, schema, [("x\x1f", "y", 5, "flu"), ("x", "\x1fy", 6, "hiv")])
    assert isinstance(outcome[0], int) and outcome[0] >= 3 and outcome[1] >= 2, outcome


def test_people_of_a_composite_key_are_published(db, schema):
    """Rows of one column's text split differently ('ab', '') and ('a', 'b'): two people."""
    outcome = refresh_outcome(db, schema, [("ab", "", 5, "flu"), ("a", "b", 6, "hiv")])
    assert isinstance(outcome[0], int) and outcome[0] >= 3 and outcome[1] >= 2, outcome
