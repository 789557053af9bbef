"""Adversarial: the analyst who keeps every version intersects, for each person, the values of
the classes that could hold them, over the versions where some class could; a version where no
class holds a person (a version of no rows, or QIs outside every released box) tells him nothing
of them and he skips it (as tests.helpers.pinned_by_intersection does, which the sweeps count
pins with). Here the analyst skips such versions, over sequences of test_stable_comebacks_wide_ranges.py's kind (people back
with another value) that publish many versions of no rows, and counts everyone left with fewer
than l candidates (true value or not)."""
from __future__ import annotations

import pytest

from tests.adversarial.test_stable_comebacks_wide_ranges import WideSequence
from tests.helpers import pinned_by_intersection


def candidates(kept: list[dict]) -> dict:
    """Each person's values that every class which could hold them, in every kept version where
    one could, holds."""
    out: dict = {}
    for version in kept:
        for person, classes in version["people"].items():
            if classes:
                values = {v for n in classes for v in version["classes"][n]}
                out[person] = out.get(person, values) & values
    return out


def test_the_helpers_intersection_pins_a_person_narrowed_after_a_version_of_no_rows():
    kept = [{"people": {"p": [1]}, "classes": {1: ["flu", "hiv"]}},
            {"people": {"p": []}, "classes": {}},
            {"people": {"p": [1]}, "classes": {1: ["flu", "ok"]}}]
    assert candidates(kept) == {"p": {"flu"}}
    assert pinned_by_intersection(kept) == {"p": "flu"}


@pytest.mark.parametrize("seed", [41191, 41045, 41215])
def test_people_keep_l_candidates_across_versions_of_no_rows(db, schema, seed):
    """Seed 41191 (k = 6, entropy l = 4, 9 versions of no rows), 41045 (k = 5, l = 3, 6),
    41215 (k = 3, entropy l = 4, 6): nobody, published or held back, is left with fewer than
    l values by the analyst who skips the versions that hold them nowhere."""
    sequence = WideSequence(db, schema, seed, new_values=True)
    sequence.true_pins()
    assert sum(1 for kept in sequence.kept[1:] if not kept["classes"]) >= 6
    assert {p: sorted(v) for p, v in candidates(sequence.kept).items() if len(v) < sequence.l} == {}
