"""Adversarial: a stable release's entries and steps (anon.release_state entries, entry_versions,
entry_groups, waiting_persons, waiting_entries, version, entries_since;
anon.release_versions.next_groups) written malformed by the release's owner, who may write its
own rows, or restored from a damaged backup. The owner is trusted with what the state says
(docs/security.md), but a malformed state must not reach Python as a traceback (38000) or an
unexplained integer overflow: the refresh refuses it with a clear error (SQLSTATE class 22, its
message or hint naming the table to restore, no "Report this"), or refreshes without publishing
a class below k or l or a difference that pins someone."""
from __future__ import annotations

import psycopg
import pytest

from tests.adversarial.test_stable_refresh_attacks import forty
from tests.adversarial.test_tampered_release_state import below_k_or_l, release_id

MALFORMED = {
    # an array element set to NULL (the CHECK counts elements, not their nulls)
    "an entry set to NULL": "UPDATE anon.release_state SET entries[1] = NULL WHERE release_id = %s",
    "an entry's version set to NULL":
        "UPDATE anon.release_state SET entry_versions[1] = NULL WHERE release_id = %s",
    "an entry's group set to NULL":
        "UPDATE anon.release_state SET entry_groups[1] = NULL WHERE release_id = %s",
    "a step set to NULL": (
        "UPDATE anon.release_versions SET next_groups = array_fill(NULL::int, "
        "ARRAY[cardinality(group_ids)]) WHERE release_id = %s AND next_groups IS NOT NULL"),
    # negative groups: packed with the version into one key, they overflow int4 when stored
    "entries' groups negative": (
        "UPDATE anon.release_state SET entry_groups = array_fill(-1, ARRAY[cardinality(entry_groups)]) "
        "WHERE release_id = %s"),
    # the state's version at int4's end: the next one does not fit
    "the state's version at the integer's end":
        "UPDATE anon.release_state SET version = 2147483647 WHERE release_id = %s",
    # the CHECK on waiting_persons' length holds only when entries are kept
    "held back hashes cut, entries NULL":
        "UPDATE anon.release_state SET entries = NULL, waiting_persons = '\\x00' WHERE release_id = %s",
    # a two-dimensional array of as many elements
    "entries two-dimensional": "UPDATE anon.release_state SET entries = ARRAY[entries] WHERE release_id = %s",
}


def refreshes_refusing_clearly_or_pinning_no_one(db, release, analyst) -> None:
    for i, age in ((13, 37), (22, 4)):
        db.execute("UPDATE pt SET age = %s, dx = 'cancer' WHERE id = %s", (age, i))
        analyst.changed(i)
        try:
            with db.transaction():
                db.execute("SELECT anon.refresh(%s)", (release,))
        except psycopg.Error as refused:
            said = f"{refused.diag.message_primary} {refused.diag.message_hint}"
            assert refused.sqlstate.startswith("22"), (refused.sqlstate, said)
            assert "Report this" not in said and ("release_state" in said or "release_versions" in said), said
        assert below_k_or_l(db, release, 5, 2) == []
        analyst.keep()
    assert analyst.pinned() == {}


def two_refreshes(db, schema) -> tuple[str, object, int]:
    release, analyst = forty(db, schema)
    for i, age in ((3, 38), (8, 2)):
        db.execute("UPDATE pt SET age = %s, dx = 'cancer' WHERE id = %s", (age, i))
        analyst.changed(i)
        db.execute("SELECT anon.refresh(%s)", (release,))
        analyst.keep()
    return release, analyst, release_id(db, release)


@pytest.mark.parametrize("malformed", list(MALFORMED))
def test_a_malformed_entry_or_step_is_refused_where_it_is_written(db, schema, malformed):
    release, analyst, rid = two_refreshes(db, schema)
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        db.execute(MALFORMED[malformed], (rid,))
    assert refused.value.diag.table_name in ("release_state", "release_versions")
    refreshes_refusing_clearly_or_pinning_no_one(db, release, analyst)


class RolledBack(Exception):
    pass


@pytest.mark.parametrize("malformed", list(MALFORMED))
def test_a_malformed_entry_or_step_restored_past_the_checks_is_refused_clearly_or_pins_no_one(
        db, schema, malformed):
    """A row restored from a dump of a database without the CHECKs (dropped here, within a
    transaction rolled back at the end) is read element by element."""
    release, analyst, rid = two_refreshes(db, schema)
    with pytest.raises(RolledBack), db.transaction():
        db.execute("ALTER TABLE anon.release_state DROP CONSTRAINT entries_well_formed")
        db.execute("ALTER TABLE anon.release_versions DROP CONSTRAINT next_groups_well_formed")
        assert db.execute(MALFORMED[malformed], (rid,)).rowcount >= 1
        refreshes_refusing_clearly_or_pinning_no_one(db, release, analyst)
        raise RolledBack
