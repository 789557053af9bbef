"""Adversarial: the random churn of tests/adversarial/test_stable_comebacks.py (leavers, joiners,
leavers who come back with their record or other QIs, QI and value updates, released classes and
QI bands deleted; the analyst keeps every version and follows who comes back) over parameter
ranges no sequence there draws: k 2-6, l 2-4 (recursive or entropy), 20-200 people; leavers who
also come back with another sensitive value (a pin counts when it is any value the person had
while kept); sensitive values that are or hold the marks the stable check's joined reads use, in
both layouts. Each seed below held a sweep of its kind (tests/adversarial, seeds 7000-7199,
8000-8079, 9000-9079, 9500-9649); they guard that the analyst pins no true value by difference
over any pair of kept versions nor by intersection, and that every version keeps k and l in the
released rows."""
from __future__ import annotations

import numpy as np
import psycopg
import psycopg.sql
import pytest

from tests.adversarial import test_stable_comebacks as comebacks
from tests.helpers import class_sizes, distinct_sensitive_per_class, pinned_by_intersection

#: sensitive values that are the joined reads' marks (0x02: NULL, 0x01: an element's end), hold
#: them, are empty, or look like SQL's NULL or an array literal
MARKED_VALUES = ["\x02", "a\x01b", "", "NULL", '{,}\\"', "é"]


class WideSequence(comebacks.Sequence):
    """A sequence whose k, l, size and span are drawn from wider ranges (its own generator), and
    whose leavers may come back with another sensitive value; every version's smallest class and
    fewest distinct values recorded from the released rows."""

    def __init__(self, db, schema: str, seed: int, follows: str = "c", new_values: bool = False):
        super().__init__(db, schema, seed, follows, heavy=True)
        self.rng = rng = np.random.default_rng(seed + 10_000_000)
        self.k, self.l = int(rng.integers(2, 7)), int(rng.integers(2, 5))
        self.entropy = bool(rng.integers(0, 3) == 0)
        self.n_values, n = int(rng.integers(self.l, 6)), int(rng.integers(20, 201))
        self.span = int(rng.integers(8, 40))
        self.refreshes = int(rng.integers(4, 10))
        self.table = {i: self.record() for i in range(n)}
        self.next_id = n
        self.new_values, self.truths, self.smallest = new_values, {}, []

    def keep(self, release: str, rows: list | None = None) -> None:
        super().keep(release, rows)
        for pk, value in self.truth.items():
            self.truths.setdefault(pk, set()).add(value)
        if rows is None:
            sizes = class_sizes(self.db, release, list(comebacks.QIS))
            kinds = distinct_sensitive_per_class(self.db, release, list(comebacks.QIS), "dx")
            self.smallest.append((min(sizes, default=None), min(kinds, default=None)))

    def churn(self, release: str) -> None:
        super().churn(release)
        if self.new_values and self.left and self.rng.integers(0, 2):
            back = self.rng.choice(sorted(self.left), size=min(len(self.left), int(self.rng.integers(1, 5))),
                                   replace=False).tolist()
            for i in back:
                age, zip_, value = self.left.pop(i)
                others = [v for v in comebacks.VALUES[:self.n_values] if v != value]
                self.table[i] = (age, zip_, others[int(self.rng.integers(0, len(others)))])
                self.changed(i, "c")
            self.insert(back)

    def true_pins(self) -> tuple[list, dict]:
        """Runs the sequence: the true pins by difference (earlier, later, person, value) and by
        intersection; asserts k and l of every version that has rows."""
        self.run()
        for k, l in self.smallest:
            assert k is None or (k >= self.k and l >= self.l), (self.k, self.l, self.smallest)
        by_intersection = pinned_by_intersection(self.kept)
        return ([(i, j, p, v) for i, j, p, v, _ in self.pins if v in self.truths[p]],
                {p: v for p, v in by_intersection.items() if v in self.truths[p]})


@pytest.mark.parametrize("seed", [7057, 7081, 7117, 7193, 7196])
def test_comebacks_at_wider_k_l_and_sizes_pin_no_one(db, schema, seed):
    """Seeds of k 3-6, l 3-4, 110-200 people (7081 publishes versions of no rows)."""
    assert WideSequence(db, schema, seed).true_pins() == ([], {})


@pytest.mark.parametrize("seed", [9000, 9001, 9002])
def test_an_analyst_who_follows_comebacks_and_qi_updates_pins_no_one(db, schema, seed):
    assert WideSequence(db, schema, seed, follows="cq").true_pins() == ([], {})


@pytest.mark.parametrize("seed", [9500, 9501, 9502])
def test_comebacks_with_another_sensitive_value_pin_none_of_their_values(db, schema, seed):
    assert WideSequence(db, schema, seed, new_values=True).true_pins() == ([], {})


@pytest.mark.parametrize("layout", ["compact", "flat"])
@pytest.mark.parametrize("seed", [8000, 8002])
def test_comebacks_with_marked_sensitive_values_pin_no_one(db, schema, seed, layout, monkeypatch):
    monkeypatch.setattr(comebacks, "VALUES", MARKED_VALUES)
    create = comebacks.create_release
    monkeypatch.setattr(comebacks, "create_release",
                        lambda *args, **kwargs: create(*args, layout=layout, **kwargs))
    assert WideSequence(db, schema, seed).true_pins() == ([], {})


@pytest.mark.parametrize("seed", [9647, 9784, 20072, 20093])
def test_a_refresh_after_comebacks_with_another_value_is_never_refused_by_its_own_check(db, schema, seed):
    """Seed 9647 (k = 5, entropy l = 2, 194 people, 9 refreshes, heavy churn, leavers who come
    back with another sensitive value, versions 3-5 of no rows): at the eighth refresh one group
    holds everyone, with over 12 ancestors in earlier versions, some of them with nobody left in
    the table; the part an analyst forms of the others (core.republish.unsafe_unions) must be
    checked before publishing, so that the refresh publishes a version or one of no rows, never
    one the release's own check refuses (Sequence.run asserts no refusal says "Report this");
    seeds 9784, 20072 and 20093 likewise."""
    WideSequence(db, schema, seed, new_values=True).true_pins()


@pytest.mark.parametrize("seed", [30136, 30230])
def test_a_person_back_with_another_value_keeps_l_candidates_for_their_earlier_one(db, schema, seed):
    """Seed 30136 (k = 2, l = 2, 4 values, 5 refreshes, heavy churn): person 55, with 'hiv' in a
    class of {hiv, hiv, ok}, leaves and comes back with 'flu'; held back, they lie in a class
    of {cold, flu, hiv}: the analyst who follows them intersects the two classes to 'hiv', their
    earlier value, unless that class shows l of their candidates {hiv, ok} (or the version
    shows no rows). Seed 30230 likewise (two people)."""
    assert WideSequence(db, schema, seed, new_values=True).true_pins() == ([], {})


class _Refusals:
    """A connection whose refreshes the release's check refused are recorded (their messages)."""

    def __init__(self, conn):
        self.conn, self.refused = conn, []

    def execute(self, query, *args, **kwargs):
        try:
            return self.conn.execute(query, *args, **kwargs)
        except psycopg.errors.DataException as refused:
            self.refused.append(refused.diag.message_primary)
            raise

    def __getattr__(self, name):
        return getattr(self.conn, name)


def test_the_check_refuses_a_version_whose_held_back_person_back_it_would_narrow_below_l(
        connect, schema):
    """Seed 30136 with the run's bound on people back switched off in the backend
    (core.republish.keeps_candidates passing every option): the release's own check, from the
    released rows, intersects the class that holds person 55's QIs while they are held back
    with their candidates, and refuses the version (22000, fewer than l candidates), so the
    analyst pins nothing."""
    with connect() as conn:
        conn.execute(psycopg.sql.SQL("SET search_path = {}, public").format(psycopg.sql.Identifier(schema)))
        conn.execute("SELECT * FROM anon.versions()").fetchall()      # activates the environment
        conn.execute("""DO $$
import numpy as np
from plpy_anon.core import republish
republish.keeps_candidates = lambda groups, candidates, stacked, l: np.ones(stacked.shape[:2], dtype=bool)
$$ LANGUAGE plpython3u""")
        refusals = _Refusals(conn)
        assert WideSequence(refusals, schema, 30136, new_values=True).true_pins() == ([], {})
    assert any("fewer than l = 2 candidate" in message for message in refusals.refused), refusals.refused
