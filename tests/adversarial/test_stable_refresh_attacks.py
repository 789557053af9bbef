"""The stable refresh mode attacked by an analyst who keeps every version and knows who is in the
table with their quasi-identifiers, and by whom and when each person was changed: every change
of a person he witnesses (an UPDATE of QIs or value, a delete and re-insert, a new id) makes the
old record a leaver and the new one a joiner for him. His attack is tests.helpers'
pinned_by_difference over every pair of kept versions, fed with that knowledge."""
from __future__ import annotations

import threading
import uuid

import numpy as np
import psycopg
import pytest
from psycopg import sql

from tests.helpers import create_release, keep_released_version, pinned_by_difference
from tests.waits import cpu_seconds

QIS = {"age": "range"}
VALUES = ["flu", "hiv", "cold", "ok"]


class Analyst:
    """Keeps every version; knows each record (id, QIs) and counts every change he sees of it."""

    def __init__(self, db, release: str, schema: str, qis: dict | None = None):
        self.db, self.release, self.schema, self.qis = db, release, schema, qis or QIS
        self.epoch: dict[int, int] = {}
        self.versions: list[dict] = []

    def changed(self, *ids: int) -> None:
        for i in ids:
            self.epoch[i] = self.epoch.get(i, 0) + 1

    def keep(self) -> None:
        n = len(self.versions)
        seen = sql.Identifier(self.schema, f"seen{n}")
        self.db.execute(sql.SQL("CREATE TABLE {} AS SELECT id::text || '#' || coalesce(e.epoch, 0) AS pk, "
                                "pt.* FROM pt LEFT JOIN unnest(%s::int[], %s::int[]) e(i, epoch) ON e.i = pt.id")
                        .format(seen), (list(self.epoch), list(self.epoch.values())))
        self.versions.append(keep_released_version(self.db, self.release, seen.as_string(self.db),
                                                   "pk", self.qis, "dx"))

    def pinned(self) -> dict:
        out = {}
        for j in range(1, len(self.versions)):
            for i in range(j):
                out.update(pinned_by_difference(self.versions[i], self.versions[j]))
        return out


def forty(db, schema) -> tuple[str, Analyst]:
    db.execute("CREATE TABLE pt (id bigint PRIMARY KEY, age int, dx text)")
    db.execute("INSERT INTO pt SELECT g, g, (ARRAY['flu','hiv','cold','ok'])[1 + g % 4] "
               "FROM generate_series(1, 40) g")
    release = create_release(db, "mondrian_view", schema, "pt", k=5, l=2, quasi_identifiers=["age"],
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    analyst = Analyst(db, release, schema)
    analyst.keep()
    return release, analyst


def refresh(db, release) -> str | None:
    """anon.refresh; the refusal's message if refused (the published version stays)."""
    try:
        db.execute("SELECT anon.refresh(%s)", (release,))
    except psycopg.errors.DataException as refused:
        assert "Report this" not in (refused.diag.message_hint or ""), refused.diag.message_primary
        return refused.diag.message_primary
    return None


def test_an_update_of_only_the_sensitive_value_pins_no_one(db, schema):
    release, analyst = forty(db, schema)
    for i in (33, 34, 35, 36):
        db.execute("UPDATE pt SET dx = 'cancer' WHERE id = %s", (i,))
        analyst.changed(i)
        assert refresh(db, release) is None
        analyst.keep()
    assert analyst.pinned() == {}


def test_an_update_moving_a_person_across_classes_pins_no_one(db, schema):
    release, analyst = forty(db, schema)
    for i, age in ((3, 38), (8, 2), (13, 37), (22, 4)):
        db.execute("UPDATE pt SET age = %s, dx = 'cancer' WHERE id = %s", (age, i))
        analyst.changed(i)
        refresh(db, release)
        analyst.keep()
    assert analyst.pinned() == {}


def test_a_person_deleted_and_reinserted_with_the_same_id_is_not_pinned(db, schema):
    release, analyst = forty(db, schema)
    for statement in ("DELETE FROM pt WHERE id = 33", "INSERT INTO pt VALUES (33, 33, 'cancer')") * 2:
        db.execute(statement)
        analyst.changed(33)
        refresh(db, release)
        analyst.keep()
    with db.transaction():        # both in one refresh: an update for the release
        db.execute("DELETE FROM pt WHERE id = 12")
        db.execute("INSERT INTO pt VALUES (12, 12, 'gout')")
    analyst.changed(12)
    refresh(db, release)
    analyst.keep()
    assert analyst.pinned() == {}


def test_truncate_then_reload_with_one_change_pins_no_one(db, schema):
    release, analyst = forty(db, schema)
    db.execute("TRUNCATE pt")
    assert "empty" in refresh(db, release)
    db.execute("INSERT INTO pt SELECT g, g, (ARRAY['flu','hiv','cold','ok'])[1 + g % 4] "
               "FROM generate_series(1, 40) g")
    db.execute("UPDATE pt SET dx = 'cancer' WHERE id = 33")
    analyst.changed(33)
    assert refresh(db, release) is None
    analyst.keep()
    assert analyst.pinned() == {}


def test_a_rekeyed_person_is_not_pinned(db, schema):
    release, analyst = forty(db, schema)
    db.execute("UPDATE pt SET id = 1033, dx = 'cancer' WHERE id = 33")
    refresh(db, release)
    analyst.keep()
    assert analyst.pinned() == {}
    assert db.execute(f"SELECT count(*) FROM {release} WHERE dx = 'cancer'").fetchone()[0] == 0


def test_joiners_with_a_null_quasi_identifier_are_published_only_l_diverse(db, schema):
    release, _ = forty(db, schema)
    db.execute("INSERT INTO pt VALUES (41, NULL, 'cancer')")
    refresh(db, release)
    assert db.execute(f"SELECT count(*) FROM {release} WHERE dx = 'cancer'").fetchone()[0] == 0
    db.execute("INSERT INTO pt VALUES (42, NULL, 'aids')")
    refresh(db, release)
    published = db.execute(f"SELECT count(DISTINCT dx) FROM {release} WHERE dx IN ('cancer', 'aids')").fetchone()[0]
    assert published in (0, 2)


def test_many_refreshes_in_one_transaction_and_two_concurrent_ones_pin_no_one(db, schema, connect):
    release, analyst = forty(db, schema)
    with db.transaction():
        for i in range(5):
            db.execute("UPDATE pt SET dx = 'cancer' WHERE id = %s", (30 + i,))
            db.execute("SELECT anon.refresh(%s)", (release,))
    analyst.changed(*range(30, 35))
    analyst.keep()
    db.execute("INSERT INTO pt SELECT g, g % 40, 'gout' FROM generate_series(100, 104) g")
    errors = []

    def run():
        with connect() as conn:
            try:
                conn.execute("SELECT anon.refresh(%s)", (release,))
            except psycopg.Error as e:
                errors.append(e)
    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    analyst.keep()
    assert analyst.pinned() == {}


def test_another_custodian_reads_no_release_versions_of_a_release_it_cannot_read(db, schema, connect):
    release, _ = forty(db, schema)
    rid = db.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                     "release_name) = %s", (release,)).fetchone()[0]
    role = f"cust_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(sql.Identifier(role)))
    try:
        with connect(user=role) as other:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                other.execute(f"SELECT count(*) FROM {release}")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                other.execute("SELECT vals FROM anon.release_versions WHERE release_id = %s", (rid,))
            seen = other.execute("SELECT vals FROM anon.readable_release_versions "
                                 "WHERE release_id = %s", (rid,)).fetchall()
    finally:
        db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))
    assert seen == []


def test_classes_tied_on_every_quasi_identifier_pin_no_one(db, schema):
    release, analyst = forty(db, schema)
    db.execute("UPDATE pt SET age = 7 WHERE id <= 10")      # two groups, one released class
    analyst.changed(*range(1, 11))
    assert refresh(db, release) is None
    analyst.keep()
    db.execute("UPDATE pt SET dx = 'cancer' WHERE id = 3")
    db.execute("DELETE FROM pt WHERE id = 8")
    analyst.changed(3, 8)
    assert refresh(db, release) is None
    analyst.keep()
    assert analyst.pinned() == {}


@pytest.mark.parametrize("qis", [["big"], ["d"], ["x"], ["big", "d", "x"]])
def test_extreme_values_refresh_and_stay_l_diverse(db, schema, qis):
    db.execute("CREATE TABLE ex (id bigint PRIMARY KEY, big bigint, d date, x numeric, dx text)")
    db.execute("""INSERT INTO ex SELECT g,
        CASE g % 7 WHEN 0 THEN 9223372036854775807 WHEN 1 THEN -9223372036854775808 ELSE g END,
        CASE g % 5 WHEN 0 THEN 'infinity'::date WHEN 1 THEN '-infinity'::date ELSE date '2000-01-01' + g END,
        CASE WHEN g % 6 = 0 THEN 'NaN'::numeric ELSE g END, (ARRAY['flu','hiv','cold','ok'])[1 + g % 4]
        FROM generate_series(1, 60) g""")
    release = create_release(db, "mondrian_view", schema, "ex", k=5, l=2, quasi_identifiers=qis,
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    db.execute("INSERT INTO ex VALUES (1000, 9223372036854775807, 'infinity', 'NaN', 'cancer'), "
               "(1001, -9223372036854775808, '-infinity', 'NaN', 'gout')")
    assert refresh(db, release) is None
    db.execute("UPDATE ex SET dx = 'zz' WHERE id IN (7, 14)")
    assert refresh(db, release) is None
    cols = sql.SQL(", ").join(map(sql.Identifier, qis))
    smallest = db.execute(sql.SQL("SELECT min(n), min(l) FROM (SELECT count(*) n, count(DISTINCT dx) l "
                                  "FROM {} GROUP BY {}) c").format(sql.SQL(release), cols)).fetchone()
    assert smallest[0] >= 5 and smallest[1] >= 2


def test_a_stable_release_without_value_set_quasi_identifiers_is_not_quadratic_in_its_classes(db, schema):
    db.execute("CREATE TABLE big (id int PRIMARY KEY, a int, b int, dx text)")
    db.execute("INSERT INTO big SELECT g, (g * 7919) % 1000, (g * 104729) % 997, "
               "(ARRAY['flu','hiv','cold','ok'])[1 + g % 4] FROM generate_series(1, 16000) g")
    db.execute("SET statement_timeout = '120s'")    # a quadratic build: minutes; stopped here
    started = cpu_seconds(db.info.backend_pid)
    try:
        create_release(db, "mondrian_view", schema, "big", k=5, l=2, quasi_identifiers=["a", "b"],
                       sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    finally:
        db.execute("RESET statement_timeout")
    # its backend's CPU, which a loaded machine does not lengthen: well under a second here
    assert cpu_seconds(db.info.backend_pid) - started < 8


def test_the_row_order_of_a_stable_refresh_does_not_tell_which_joiner_has_which_value(db, schema):
    db.execute("CREATE TABLE pt (id bigint PRIMARY KEY, age int, dx text)")
    follows, trials = 0, 8
    for trial in range(trials):
        db.execute("TRUNCATE pt")
        db.execute("INSERT INTO pt SELECT g, g, (ARRAY['flu','hiv','cold','ok'])[1 + g % 4] "
                   "FROM generate_series(1, 40) g")
        release = create_release(db, "mondrian_view", schema, "pt", k=5, l=2, quasi_identifiers=["age"],
                                 sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
        values = ["aaa", "zzz"] if trial % 2 else ["zzz", "aaa"]
        db.execute("INSERT INTO pt VALUES (41, 33, %s), (42, 34, %s)", values)   # one batch, 2 values
        assert refresh(db, release) is None
        listed = [r[0] for r in db.execute(f"SELECT dx FROM {release} WHERE age @> 33").fetchall()]
        assert set(values) <= set(listed)           # both joiners published together (l = 2 of them)
        follows += listed.index(values[0]) < listed.index(values[1])
        db.execute("SELECT anon.drop_release(%s)", (release,))
    # a shuffled order lists the first joiner's value first in every trial, or in none, with
    # probability 2 / 2^8
    assert 0 < follows < trials, f"the first inserted joiner's value came first {follows} of {trials} times"


@pytest.mark.parametrize("seed", range(3))
def test_random_churn_with_updates_of_qis_and_values_pins_no_one(db, schema, seed):
    rng = np.random.default_rng(seed)
    qis = {"age": "range", "zip": "range"}
    values = ["flu", "hiv", "cold", "ok", "gout"]

    def person(i):
        return i, int(rng.integers(20, 40)), int(rng.integers(0, 12)), values[int(rng.integers(0, 5))]
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, zip int, dx text)")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)", [person(i) for i in range(60)])
    release = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=list(qis),
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    analyst = Analyst(db, release, schema, qis)
    analyst.keep()
    for batch in range(4):
        ids = [r[0] for r in db.execute("SELECT id FROM pt").fetchall()]
        pick = rng.choice(ids, size=9, replace=False).tolist()
        db.execute("DELETE FROM pt WHERE id = ANY(%s)", (pick[:3],))
        for i in pick[3:6]:
            db.execute("UPDATE pt SET age = %s, zip = %s WHERE id = %s", person(i)[1:3] + (i,))
        for i in pick[6:]:
            db.execute("UPDATE pt SET dx = %s WHERE id = %s", (person(i)[3], i))
        with db.cursor() as cur:
            cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)", [person(100 + 3 * batch + j) for j in range(3)])
        analyst.changed(*pick)
        refresh(db, release)
        analyst.keep()
    assert analyst.pinned() == {}
