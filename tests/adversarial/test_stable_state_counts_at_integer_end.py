"""Adversarial: a stable release's state written by its owner (who may write its own rows) with a
person's count of versions at int4's end. The owner is trusted with what the state says
(docs/security.md), but a malformed state must be refused with a clear error that names the
table to restore (SQLSTATE class 22, no "Report this"), or refreshed without publishing a class
below k or l or a difference that pins someone; not end as an integer overflow of the next
count, whose message says nothing of where it came from."""
from __future__ import annotations

from tests.adversarial.test_release_state_entries_malformed import (
    refreshes_refusing_clearly_or_pinning_no_one,
    two_refreshes,
)


def test_a_persons_count_of_versions_at_the_integers_end_is_refused_clearly(db, schema):
    release, analyst, rid = two_refreshes(db, schema)
    db.execute("UPDATE anon.release_state SET versions[1] = 2147483647 WHERE release_id = %s", (rid,))
    refreshes_refusing_clearly_or_pinning_no_one(db, release, analyst)
