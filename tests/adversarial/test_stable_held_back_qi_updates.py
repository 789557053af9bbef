"""Adversarial: a person held back in a stable release whose QIs are then updated (an UPDATE,
the same id). The release follows them by id: their candidates are those of the class that
could hold them when they were held back, intersected with the classes that could hold their
new QIs; an analyst who follows the update does the same from the released rows alone, and
must be left l values whatever the update does."""
from __future__ import annotations

import pytest

from tests.adversarial.test_stable_joiner_held_first import versions_kept
from tests.helpers import intersected_below_l

#: after person 7 (age 11, a) joins {a, b, c} (ages 10-12) and is held back
UPDATES = {
    # into {d, e, f} (ages 50-52) alone: no value shared with the class that held them
    "into another class": ["UPDATE pt SET age = 51 WHERE id = 7"],
    "into another class with another value": ["UPDATE pt SET age = 51, dx = 'd' WHERE id = 7"],
    "there and back": ["UPDATE pt SET age = 51 WHERE id = 7", "UPDATE pt SET age = 12 WHERE id = 7"],
    # outside every class, then joiners of other values arrive there
    "out of every class": ["UPDATE pt SET age = 99 WHERE id = 7",
                           "INSERT INTO pt VALUES (8, 98, 'x'), (9, 97, 'y'), (10, 99, 'z')"],
    # the two classes' people swap their ages
    "everyone swapped": ["UPDATE pt SET age = CASE WHEN age < 30 THEN age + 40 ELSE age - 40 END"],
}


@pytest.mark.parametrize("updates", sorted(UPDATES))
def test_a_joiner_held_back_then_updated_keeps_l_candidates(db, schema, updates):
    kept, errors = versions_kept(db, schema, ["INSERT INTO pt VALUES (7, 11, 'a')", *UPDATES[updates]])
    assert kept[1]["people"][7]       # held back in a class that could hold them
    assert (errors, intersected_below_l(kept, 2)) == ([None] * len(errors), {})
