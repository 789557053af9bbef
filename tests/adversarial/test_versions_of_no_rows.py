"""Adversarial: a stable refresh that no grouping keeps safe publishes a version of no rows (with a
WARNING). Heavy-churn sequences of tests/adversarial/test_stable_comebacks.py where it happens
(seeds found by a sweep of seeds 2000-2299, analyst following no change): the versions with rows
after it keep k and l in the released rows, and the analyst who keeps every version pins no one
by difference or intersection. The custodian can tell it happened (the WARNING, a row count of
0, the groups withdrawn), and the catalog does not claim a k the released rows do not have."""
from __future__ import annotations

import pytest
from psycopg import sql

from tests.adversarial.test_stable_comebacks import Sequence
from tests.helpers import class_sizes, distinct_sensitive_per_class

#: seeds whose sequence has a version of no rows followed by one with rows
SEEDS = [2091, 2172, 2246, 2273]


def watched(db, sequence: Sequence) -> list:
    """Each version kept: its rows, its smallest class and fewest distinct values of dx, and the
    catalog's figures of it (row_count, achieved_k, the refresh's groups withdrawn, verified)."""
    seen, keep = [], sequence.keep

    def kept(release):
        rows = db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(release))).fetchone()[0]
        k = min(class_sizes(db, release, ["age", "zip"]), default=None)
        l = min(distinct_sensitive_per_class(db, release, ["age", "zip"], "dx"), default=None)
        status = db.execute("SELECT row_count, achieved_k, verified FROM anon.release_status() "
                            "WHERE release = %s", (release,)).fetchone()
        history = db.execute(
            "SELECT h.row_count, h.achieved_k, (h.across_versions -> 'groups_by_choice' "
            "->> 'withdraw')::int FROM anon.refresh_history h JOIN anon.releases r "
            "ON r.release_id = h.release_id WHERE format('%%I.%%I', r.release_schema, "
            "r.release_name) = %s ORDER BY h.refresh_id DESC LIMIT 1", (release,)).fetchone()
        seen.append({"rows": rows, "k": k, "l": l, "status": status, "history": history})
        keep(release)
    sequence.keep = kept
    return seen


@pytest.mark.parametrize("seed", SEEDS)
def test_versions_after_a_version_of_no_rows_keep_k_and_l_and_pin_no_one(db, schema, seed):
    sequence = Sequence(db, schema, seed, follows="", heavy=True)
    warnings = []
    db.add_notice_handler(lambda d: warnings.append(d.message_primary)
                          if d.severity == "WARNING" else None)
    seen = watched(db, sequence)
    assert sequence.run() == ({}, {})
    empty = [i for i, v in enumerate(seen) if v["rows"] == 0]
    # the property needs a version of no rows and a version with rows after it
    assert empty and any(v["rows"] for v in seen[empty[0] + 1:]), empty
    for version in seen:
        if version["rows"]:
            assert version["k"] >= sequence.k and version["l"] >= sequence.l
    # the custodian can tell: a WARNING each, the history's row count 0 and groups withdrawn
    assert sum("publishes no rows" in w for w in warnings) == len(empty)
    for i in empty:
        row_count, _, withdrawn = seen[i]["history"]
        assert row_count == 0 and withdrawn > 0


def test_a_version_of_no_rows_claims_no_achieved_k(db, schema):
    sequence = Sequence(db, schema, 2091, follows="", heavy=True)
    seen = watched(db, sequence)
    sequence.run()
    version = next(v for v in seen if v["rows"] == 0)
    assert version["k"] is None
    assert version["status"][1] is None and version["history"][1] is None
