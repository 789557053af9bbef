"""replace => true of a release in the stable mode drops its history (docs/republication.md,
'Honest limits'): the versions it published stay with the analysts who kept them, who can
intersect and subtract them with the new release's. The custodian is warned when it happens,
and only then."""
from __future__ import annotations

import contextlib

import psycopg
import pytest

from tests.db.test_custodian import custodian_role
from tests.helpers import release_schema_of

PATIENTS = """
CREATE TABLE patients (id int, age int, sex text, zip int, dx text);
INSERT INTO patients
SELECT i, 20 + (hashtext('a' || i) & 1023) % 60, (ARRAY['F', 'M'])[1 + (hashtext('s' || i) & 1)],
       10000 + (hashtext('z' || i) & 1023) % 40, 'dx' || ((hashtext('d' || i) & 1023) % 8)
FROM generate_series(1, 240) i"""


def create(db, schema, mode: str, **extra) -> str:
    """A Mondrian release of patients in ``mode`` (people followed by ``id``); its name."""
    return db.execute(
        "SELECT anon.mondrian_view('patients', k => 4, l => 3, sensitive => ARRAY['dx'], "
        "quasi_identifiers => ARRAY['age', 'sex', 'zip'], identifiers => ARRAY['id'], "
        "refresh_mode => %s, release_schema => %s, release_name => 'patients_anon', "
        "replace => %s)",
        (mode, release_schema_of(schema), extra.get("replace", False))).fetchone()[0]


@contextlib.contextmanager
def diagnostics(conn):
    """Every notice ``conn`` receives in the block: (severity, message, hint)."""
    seen: list[tuple[str, str, str | None]] = []

    def handler(d):
        seen.append((d.severity_nonlocalized, d.message_primary, d.message_hint))
    conn.add_notice_handler(handler)
    try:
        yield seen
    finally:
        conn.remove_notice_handler(handler)


def warnings_of(seen) -> list[tuple[str, str | None]]:
    return [(message, hint) for severity, message, hint in seen if severity == "WARNING"]


def stored_versions(db, release: str) -> int:
    return db.execute("SELECT count(*) FROM anon.release_versions v JOIN anon.releases r "
                      "USING (release_id) WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s",
                      (release,)).fetchone()[0]


@pytest.fixture
def patients(db, schema):
    db.execute(PATIENTS)


@pytest.fixture
def custodian(db, connect):
    yield from custodian_role(db, connect)


def test_replacing_a_stable_release_with_versions_warns_with_their_count_and_a_hint(
        db, schema, patients):
    release = create(db, schema, "stable")
    db.execute("UPDATE patients SET dx = 'dx0' WHERE id % 17 = 0")
    db.execute("SELECT anon.refresh(%s)", (release,))
    assert stored_versions(db, release) == 2
    with diagnostics(db) as seen:
        assert create(db, schema, "stable", replace=True) == release
    [(message, hint)] = warnings_of(seen)
    assert f"{release_schema_of(schema)}.patients_anon" in message
    assert "the 2 versions it had published" in message
    assert "intersect and subtract" in message
    assert "anon.refresh" in hint and "docs/republication.md" in hint
    assert stored_versions(db, release) == 1      # the new history: its first version only
    # replaced by a fresh release: the stable one's version is still a history dropped
    with diagnostics(db) as seen:
        create(db, schema, "fresh", replace=True)
    [(message, _)] = warnings_of(seen)
    assert "the version it had published stays" in message


def test_no_warning_creating_a_stable_release_or_replacing_a_fresh_one(db, schema, patients):
    with diagnostics(db) as seen:
        release = create(db, schema, "fresh")
        db.execute("SELECT anon.refresh(%s)", (release,))
        create(db, schema, "fresh", replace=True)          # a fresh release keeps no history
        db.execute("SELECT anon.drop_release(%s)", (release,))
        create(db, schema, "stable")                       # created the first time
        db.execute("SELECT anon.drop_release(%s)", (release,))
        create(db, schema, "stable", replace=True)         # replace => true, nothing to replace
    assert warnings_of(seen) == []
    assert stored_versions(db, release) == 1


def test_a_failed_replace_keeps_the_release_and_its_versions_and_warns_nothing(
        db, schema, patients):
    release = create(db, schema, "stable")
    db.execute("SELECT anon.refresh(%s)", (release,))
    rows = db.execute(f"SELECT count(*) FROM {release}").fetchone()[0]
    # a second row of one person: the stable build refuses it, after the old release was dropped
    db.execute("INSERT INTO patients SELECT * FROM patients WHERE id = 1")
    db.execute("SET plpy_anon.progress = on")
    try:
        with diagnostics(db) as seen, pytest.raises(psycopg.errors.InvalidParameterValue) as info:
            create(db, schema, "stable", replace=True)
    finally:
        db.execute("RESET plpy_anon.progress")
    assert "share a value with another row" in info.value.diag.message_primary
    assert any("creating" in message for _, message, _ in seen)     # it failed in the build
    assert warnings_of(seen) == []
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == rows
    assert stored_versions(db, release) == 2


def test_a_custodian_replacing_its_stable_release_is_warned_with_row_security_off(
        connect, custodian):
    """The versions are counted as the release's owner reads them (row security), also in a
    session that turned it off, as pg_restore does."""
    role, own = custodian
    create = ("SELECT anon.mondrian_view(%s, k => 5, l => 2, quasi_identifiers => '{age,zip}', "
              "sensitive => '{dx}', refresh_mode => 'stable', release_schema => %s, "
              "replace => true)")
    with connect(user=role) as conn:
        release = conn.execute(create, (f"{own}.pat", f"{own}_rel")).fetchone()[0]
        conn.execute("SELECT anon.refresh(%s)", (release,))
        conn.execute("SET row_security = off")
        with diagnostics(conn) as seen:
            conn.execute(create, (f"{own}.pat", f"{own}_rel"))
    [(message, hint)] = warnings_of(seen)
    assert release in message and "the 2 versions it had published" in message
    assert "anon.refresh" in hint
