"""Adversarial: a stable release's salt (anon.release_secrets.person_salt, hex) written malformed
by its owner, who may write its own row, or restored from a damaged backup. Like a malformed
state (tests/adversarial/test_release_state_entries_malformed.py), it must not reach Python as
a traceback (38000): the refresh refuses it with a clear error (SQLSTATE class 22, naming the
table to restore, no "Report this"), and the published version stays. A salt replaced by
another valid one (a backup of anon.release_secrets that does not match anon.release_state)
makes every person in the table new to the release and every one it kept absent: its refreshes
must refuse, or pin no one to the analyst who keeps every version and follows people by their
ids."""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.adversarial.test_stable_comebacks import Sequence
from tests.helpers import create_release


@pytest.mark.parametrize("salt", ["zz", "abc"])
def test_a_salt_that_is_not_hexadecimal_is_refused_clearly_and_keeps_the_version(db, schema, salt):
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, zip int, dx text)")
    db.execute("INSERT INTO pt SELECT i, 20 + i % 13, i % 3, (ARRAY['a','b','c'])[1 + i % 3] "
               "FROM generate_series(1, 60) i")
    rel = create_release(db, "mondrian_view", schema, "pt", k=2, l=2, quasi_identifiers=["age", "zip"],
                         sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    before = db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(rel))).fetchone()[0]
    assert db.execute(
        "UPDATE anon.release_secrets s SET person_salt = %s FROM anon.releases r "
        "WHERE r.release_id = s.release_id AND format('%%I.%%I', r.release_schema, r.release_name) = %s",
        (salt, rel)).rowcount == 1
    db.execute("DELETE FROM pt WHERE id <= 5")
    with pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    said = f"{refused.value.diag.message_primary} {refused.value.diag.message_hint}"
    assert db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(rel))).fetchone()[0] == before
    assert refused.value.sqlstate.startswith("22"), (refused.value.sqlstate, said)
    assert "Report this" not in said and "release_secrets" in said, said


class Resalted(Sequence):
    """A sequence whose release's salt is replaced by another after its first refresh."""

    def keep(self, release: str, rows: list | None = None) -> None:
        super().keep(release, rows)
        if len(self.kept) == 2:
            assert self.db.execute(
                "UPDATE anon.release_secrets s SET person_salt = md5('another salt') "
                "FROM anon.releases r WHERE r.release_id = s.release_id "
                "AND format('%%I.%%I', r.release_schema, r.release_name) = %s", (release,)).rowcount == 1


def test_a_replaced_salt_is_refused_or_pins_no_one(db, schema):
    """Seed 30005 (k = 4, l = 2, heavy churn, the analyst following who comes back): with the
    salt kept it pins no one; with it replaced after the first refresh, he pins 7 true values
    (of 5 people, two of them before and after coming back) by difference."""
    try:
        pinned = Resalted(db, schema, 30005, heavy=True).run()
    except psycopg.Error as refused:
        assert refused.sqlstate.startswith("22") and "Report this" not in str(refused)
        return
    assert pinned == ({}, {})
