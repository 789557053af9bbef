"""Adversarial: a person new to a stable release, held back in the version they joined, then
leaving and coming back, or held back over several versions while their class changes. An
analyst who knows they are in the table takes the values of every class that could hold them
for their candidates and intersects them over the versions: at least l must stay
(docs/republication.md, "What is guaranteed", item 3)."""
from __future__ import annotations

from tests.adversarial.test_stable_joiner_held_first import intersected_below_l, versions_kept


def test_a_joiner_held_back_who_leaves_and_comes_back_keeps_l_candidates(db, schema):
    kept, errors = versions_kept(db, schema, [
        "INSERT INTO pt VALUES (7, 11, 'a')",
        "DELETE FROM pt WHERE id = 7",
        "INSERT INTO pt VALUES (7, 11, 'a')",
        "DELETE FROM pt WHERE id <= 3; INSERT INTO pt VALUES (8, 10, 'x'), (9, 12, 'y')"])
    assert all(e in (None, "22000") for e in errors), errors
    assert intersected_below_l(kept, 2) == {}


def test_a_joiner_held_back_over_versions_whose_class_changes_keeps_l_candidates(db, schema):
    kept, errors = versions_kept(db, schema, [
        "INSERT INTO pt VALUES (7, 11, 'a')",
        "DELETE FROM pt WHERE id = 2; INSERT INTO pt VALUES (10, 12, 'z')",
        "DELETE FROM pt WHERE id = 3; INSERT INTO pt VALUES (11, 10, 'x')",
        "DELETE FROM pt WHERE id IN (1, 10); INSERT INTO pt VALUES (12, 12, 'y')"])
    assert all(e in (None, "22000") for e in errors), errors
    assert intersected_below_l(kept, 2) == {}
