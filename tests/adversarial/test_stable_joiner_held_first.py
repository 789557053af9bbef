"""Adversarial: a person new to a stable release and held back in the version they joined. An
analyst who knows they are in the table cannot tell they are held back: he takes the values of
the classes that could hold them for their candidates, from that version on, and intersects
them with the classes that hold them later. The release must keep l of those values as it keeps
those of the people it published (docs/republication.md, "What is guaranteed", item 3): its
check counts them from the released rows, its run publishes or holds them so that l are left."""
from __future__ import annotations

import psycopg

from tests.helpers import create_release, intersected_below_l, keep_released_version


def versions_kept(db, schema, changes: list[str]) -> tuple[list[dict], list]:
    """A release of two classes (k = 3, l = 2, QI age): ages 10-12 with a, b, c and ages 50-52
    with d, e, f; each of ``changes`` then a refresh. Returns every version as the analyst keeps
    it (everyone in the table, published or not) and each refresh's error (None: published)."""
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, dx text)")
    db.execute("INSERT INTO pt VALUES (1, 10, 'a'), (2, 11, 'b'), (3, 12, 'c'), "
               "(4, 50, 'd'), (5, 51, 'e'), (6, 52, 'f')")
    release = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=["age"],
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    kept, errors = [], []
    try:
        kept.append(keep_released_version(db, release, "pt", "id", {"age": "range"}, "dx"))
        for change in changes:
            db.execute(change)
            try:
                db.execute("SELECT anon.refresh(%s)", (release,))
                errors.append(None)
            except psycopg.errors.DataException as refused:
                errors.append(refused.diag.sqlstate)
            kept.append(keep_released_version(db, release, "pt", "id", {"age": "range"}, "dx"))
    finally:
        db.execute("SELECT anon.drop_release(%s)", (release,))
        db.execute("DROP TABLE pt")
    return kept, errors


def test_a_joiner_held_back_is_not_pinned_by_the_class_that_publishes_them_later(db, schema):
    """Person 7 (age 11, a) joins the class {a, b, c}, which holds its multiset (a lone a
    added would pin them) and holds them back; then its three people leave and two join with
    x and y: the class could advance to {a, x, y} (each change meets l = 2), and nobody it
    published before is left to be narrowed, but the analyst, who took {a, b, c} for person
    7's candidates, would intersect them to {a}, their true value."""
    kept, errors = versions_kept(db, schema, [
        "INSERT INTO pt VALUES (7, 11, 'a')",
        "DELETE FROM pt WHERE id <= 3; INSERT INTO pt VALUES (8, 10, 'x'), (9, 12, 'y')"])
    assert errors == [None, None]
    # held back in the first refresh's class, which showed values they may not have
    assert 7 in kept[1]["people"] and kept[1]["people"][7]
    assert intersected_below_l(kept, 2) == {}


def test_a_joiner_held_back_is_published_once_their_class_keeps_l_of_their_candidates(db, schema):
    """Person 7 (age 11, a) is held back in {a, b, c} as above; then person 8 (age 12, d) joins:
    the class advances to {a, a, b, c, d}, which keeps their candidates, and publishes them (the
    held back person's candidates cost no version)."""
    kept, errors = versions_kept(db, schema, [
        "INSERT INTO pt VALUES (7, 11, 'a')", "INSERT INTO pt VALUES (8, 12, 'd')"])
    assert errors == [None, None]
    assert intersected_below_l(kept, 2) == {}
    assert sorted(kept[2]["classes"][kept[2]["people"][7][0]]) == ["a", "a", "b", "c", "d"]
