"""core.republish.difference_safe over the parts an analyst forms when some of the people who
link a part leave (between two refreshes, they link nothing for him): a part's pieces change
as their own sums of multisets, and a sum's change is not bounded by its pieces' (values added
in one piece and removed in another cancel). So checking a version against the coarsest part
(nobody left) and the finest (everyone who links it left: each class alone, whose whole
multiset meets the l model) says nothing of the parts in between; neither does checking the
parts one leaver forms (three pieces linked in a triangle split only when two leave)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st

from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republish import difference_safe

N_VALUES = 4


def multiset():
    """Counts of N_VALUES values and a last column of NULLs (none here)."""
    return st.lists(st.integers(0, 1), min_size=N_VALUES, max_size=N_VALUES).map(lambda c: c + [0])


def in_between_part_fails(models: Models, pieces) -> bool:
    """The whole part of three pieces and each piece alone are safe; two pieces together
    (the third cut off by the leavers who linked it) are not."""
    earlier = np.array([p[0] for p in pieces])
    now = np.array([p[1] for p in pieces])

    def safe(chosen) -> bool:
        return bool(difference_safe(models, now[chosen].sum(axis=0, keepdims=True),
                                    earlier[chosen].sum(axis=0, keepdims=True))[0])

    pairs = ([0, 1], [0, 2], [1, 2])
    return safe([0, 1, 2]) and all(safe([i]) for i in range(3)) and not all(safe(p) for p in pairs)


def test_the_coarsest_and_finest_parts_bound_no_part_in_between():
    for models in (Models(l=2), Models(l=2, l_diversity="entropy")):
        pieces = find(st.lists(st.tuples(multiset(), multiset()), min_size=3, max_size=3),
                      lambda p, models=models: in_between_part_fails(models, p),
                      settings=settings(max_examples=20_000, database=None,
                                        suppress_health_check=list(HealthCheck)))
        assert in_between_part_fails(models, pieces)
