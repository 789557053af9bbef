"""refresh_mode => 'stable' (issue 30): an analyst who keeps every version of a refreshed release
and knows a person's quasi-identifiers intersects the sensitive values of every class that could
hold that person, version after version. Computed here from the released rows alone (the test's
own SQL, not plpy_anon's), for the people who stay."""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.helpers import (
    class_sizes,
    create_release,
    distinct_sensitive_per_class,
    keep_released_version,
    notices,
    pinned_by_difference,
)

QIS = ["age", "sex", "zip"]


def patients_sql(rows: int) -> str:
    """A table of ``rows`` patients (id, age, sex, zip, dx: 12 values), drawn by hashes."""
    return f"""
CREATE TABLE patients (id int PRIMARY KEY, age int, sex text, zip int, dx text);
INSERT INTO patients
SELECT i, 20 + (hashtext('a' || i) & 1023) % 60, (ARRAY['F', 'M'])[1 + (hashtext('s' || i) & 1)],
       10000 + (hashtext('z' || i) & 1023) % 40,
       'dx' || ((hashtext('d' || i) & 1023) % 12)
FROM generate_series(1, {rows}) i;
"""


PATIENTS = patients_sql(2000)


def keep_version(db, release: str, version: int) -> None:
    """What the analyst stores of one version: each class's released QIs and distinct values."""
    db.execute("CREATE TABLE IF NOT EXISTS kept (version int, age int4range, sex text[], zip int4range, dx text[])")
    db.execute(f"""INSERT INTO kept SELECT %s, age, sex, zip, array_agg(DISTINCT dx) FROM {release}
                   GROUP BY age, sex, zip""", (version,))


def candidates_left(db, stayers: str) -> dict[int, int]:
    """Per stayer, the values found in every kept version's classes that could hold them."""
    versions = db.execute("SELECT count(DISTINCT version) FROM kept").fetchone()[0]
    return dict(db.execute(f"""
        SELECT id, count(*) FROM (
            SELECT p.id, v.dx FROM patients p JOIN kept k
              ON k.age @> p.age AND p.sex = ANY(k.sex) AND k.zip @> p.zip
            CROSS JOIN LATERAL unnest(k.dx) AS v(dx)
            WHERE p.id IN ({stayers})
            GROUP BY p.id, v.dx HAVING count(DISTINCT k.version) = %s) AS every_version
        GROUP BY id""", (versions,)).fetchall())


def churn(db, version: int, rows: int = 100) -> None:
    """Delete ``rows`` people (never ids <= 300, the stayers) and insert as many new ones."""
    db.execute("DELETE FROM patients WHERE id IN (SELECT id FROM patients WHERE id > 300 "
               "ORDER BY md5(id::text || %s) LIMIT %s)", (str(version), rows))
    db.execute(f"""INSERT INTO patients
        SELECT i, 20 + (hashtext('a' || i) & 1023) % 60, (ARRAY['F', 'M'])[1 + (hashtext('s' || i) & 1)],
               10000 + (hashtext('z' || i) & 1023) % 40, 'dx' || ((hashtext('d' || i) & 1023) % 12)
        FROM generate_series({10000 * version}, {10000 * version + rows - 1}) i""")


def run_versions(db, schema, mode: str, refreshes: int = 6) -> tuple[str, dict[int, int]]:
    db.execute(PATIENTS)
    release = create_release(db, "mondrian_view", schema, "patients", k=4, l=3, quasi_identifiers=QIS,
                             sensitive=["dx"], identifiers=["id"], refresh_mode=mode)
    keep_version(db, release, 0)
    for version in range(1, refreshes + 1):
        churn(db, version)
        db.execute("SELECT anon.refresh(%s)", (release,))
        keep_version(db, release, version)
        assert min(class_sizes(db, release, QIS)) >= 4
        assert min(distinct_sensitive_per_class(db, release, QIS, "dx")) >= 3
    return release, candidates_left(db, "SELECT generate_series(1, 300)")


def test_stable_refreshes_keep_every_stayer_at_l_candidates(db, schema):
    release, left = run_versions(db, schema, "stable")
    assert len(left) == 300 and min(left.values()) >= 3
    # the release's own check says the same as the analyst's computation above
    across = db.execute("SELECT verification->'across_versions' FROM anon.releases "
                        "WHERE release_schema || '.' || release_name = %s", (release,)).fetchone()[0]
    assert across["below_l"] == 0 and across["most_versions"] == 7 and across["seen_before"] > 0
    assert across["fewest_candidates"] <= min(left.values())
    history = db.execute("SELECT across_versions FROM anon.refresh_history r JOIN anon.releases x "
                         "USING (release_id) WHERE x.release_schema || '.' || x.release_name = %s",
                         (release,)).fetchall()
    assert len(history) == 6 and all(h[0]["below_l"] == 0 for h in history)


def test_fresh_refreshes_of_the_same_table_narrow_some_stayers(db, schema):
    """The attack the mode defends against is real on this data."""
    _, left = run_versions(db, schema, "fresh")
    assert min(left.values()) < 3


def test_the_default_mode(db, schema):
    db.execute(PATIENTS)
    mode = "SELECT parameters->>'refresh_mode' FROM anon.releases WHERE release_schema || '.' || release_name = %s"
    with_l = create_release(db, "mondrian_view", schema, "patients", k=4, l=2, quasi_identifiers=QIS,
                            sensitive=["dx"], identifiers=["id"])
    assert db.execute(mode, (with_l,)).fetchone()[0] == "stable"
    # a table without identifier columns (a primary key counts as one)
    db.execute("CREATE TABLE visits AS SELECT age, sex, zip, dx FROM patients")
    without_ids = create_release(db, "mondrian_view", schema, "visits", k=4, l=2, quasi_identifiers=QIS,
                                 sensitive=["dx"])
    assert db.execute(mode, (without_ids,)).fetchone()[0] == "fresh"
    k_only = create_release(db, "mondrian_view", schema, "patients", k=4, quasi_identifiers=QIS,
                            identifiers=["id"], release_name="k_only")
    assert db.execute(mode, (k_only,)).fetchone()[0] == "fresh"


@pytest.mark.parametrize("arguments, message", [
    ({"l": 2, "sensitive": ["dx"], "quasi_identifiers": QIS, "table": "visits"}, "identifier"),
    ({"l": 2, "t": 0.5, "sensitive": ["dx"], "quasi_identifiers": QIS, "identifiers": ["id"]}, "t-closeness"),
    ({"l": 2, "sensitive": ["dx"], "quasi_identifiers": QIS, "identifiers": ["id"], "refresh_mode": "later"},
     "refresh_mode"),
    # a released row keeps a person's values together: combinations are intersected, not columns
    ({"l": 2, "sensitive": ["dx", "sex"], "quasi_identifiers": ["age", "zip"], "identifiers": ["id"]},
     "one sensitive column"),
])
def test_what_the_stable_mode_refuses(db, schema, arguments, message):
    db.execute(PATIENTS)
    db.execute("CREATE TABLE visits AS SELECT age, sex, zip, dx FROM patients")
    arguments.setdefault("refresh_mode", "stable")
    table = arguments.pop("table", "patients")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        create_release(db, "mondrian_view", schema, table, k=4, **arguments)
    assert db.execute("SELECT count(*) FROM anon.releases WHERE source IN ('patients'::regclass, "
                      "'visits'::regclass)").fetchone()[0] == 0


def test_k_alone_keeps_classes_across_refreshes(db, schema):
    """Without l the mode still keeps people together: classes only merge."""
    db.execute(PATIENTS)
    release = create_release(db, "mondrian_view", schema, "patients", k=4, quasi_identifiers=QIS,
                             identifiers=["id"], refresh_mode="stable")
    release_id = db.execute("SELECT release_id FROM anon.releases WHERE release_schema || '.' || "
                            "release_name = %s", (release,)).fetchone()[0]
    # this release's people only (other tests' stable releases may follow ids 1..n too)
    present = """SELECT x.person, x.member_group FROM anon.release_people x JOIN anon.release_secrets r USING (release_id)
                 JOIN patients p ON x.person = sha256(decode(r.person_salt, 'hex')
                                                      || convert_to(p.id::text, 'UTF8'))
                 WHERE x.release_id = %s"""
    before = dict(db.execute(present, (release_id,)).fetchall())
    churn(db, 1)
    db.execute("SELECT anon.refresh(%s)", (release,))
    after = dict(db.execute(present, (release_id,)).fetchall())
    assert len(before) == 2000 and len(after) == 2000
    together = {}
    for person, group in before.items():
        if person in after:
            together.setdefault(group, set()).add(after[person])
    assert together and all(len(now) == 1 for now in together.values())
    assert min(class_sizes(db, release, QIS)) >= 4


def test_a_refresh_that_would_narrow_someone_publishes_no_rows_and_keeps_their_candidates(db, schema):
    """People 1-2 ('a') saw {a, b}; every 'b' leaves and 'c's arrive: no grouping can keep 2
    candidates for them. The last version is not left published (read with the table as it is
    now, its parts were never checked): the refresh publishes no rows, and its check from the
    released rows leaves everyone the candidates earlier versions left them."""
    db.execute("""CREATE TABLE patients (id int, age int, dx text);
                  INSERT INTO patients VALUES (1, 30, 'a'), (2, 31, 'a'), (3, 32, 'b'), (4, 33, 'b')""")
    release = create_release(db, "mondrian_view", schema, "patients", k=2, l=2, quasi_identifiers=["age"],
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    db.execute("DELETE FROM patients WHERE dx = 'b'")
    db.execute("INSERT INTO patients VALUES (5, 34, 'c'), (6, 35, 'c')")
    warned = notices(db)
    db.execute("SELECT anon.refresh(%s)", (release,))
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 0
    assert any("publishes no rows in this version" in m for m in warned), warned
    succeeded, across = db.execute("SELECT succeeded, across_versions FROM anon.refresh_history "
                                   "ORDER BY refresh_id DESC LIMIT 1").fetchone()
    assert succeeded and across["groups_by_choice"]["withdraw"] >= 1
    assert across["below_l"] == 0 and across["fewest_candidates"] == 2 and across["unsafe_unions"] == 0


def test_a_plain_refresh_keeps_the_history_too(db, schema):
    db.execute(PATIENTS)
    create_release(db, "mondrian_view", schema, "patients", k=4, l=3, quasi_identifiers=QIS,
                   sensitive=["dx"], identifiers=["id"])
    release_id, release_schema, storage = db.execute(
        "SELECT release_id, release_schema, parameters->>'storage' FROM anon.releases "
        "ORDER BY release_id DESC LIMIT 1").fetchone()
    churn(db, 1)
    db.execute(sql.SQL("REFRESH MATERIALIZED VIEW {}").format(sql.Identifier(release_schema, storage)))
    across = db.execute("SELECT verification->'across_versions' FROM anon.releases WHERE release_id = %s",
                        (release_id,)).fetchone()[0]
    assert across["most_versions"] == 2 and across["below_l"] == 0 and across["seen_before"] == 1900


def test_dropping_the_release_forgets_its_people(db, schema):
    db.execute(PATIENTS)
    release = create_release(db, "mondrian_view", schema, "patients", k=4, l=3, quasi_identifiers=QIS,
                             sensitive=["dx"], identifiers=["id"])
    release_id = db.execute("SELECT release_id FROM anon.releases WHERE release_schema || '.' || release_name = %s",
                            (release,)).fetchone()[0]
    assert db.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s", (release_id,)).fetchone()[0] == 2000
    # no identifier is stored, only salted hashes
    stored = db.execute("SELECT person, candidates FROM anon.release_people WHERE release_id = %s "
                        "LIMIT 1", (release_id,)).fetchone()
    assert len(stored[0]) == 32 and set(stored[1]) == {"dx"} and len(stored[1]["dx"]) >= 3
    person_1 = db.execute("""SELECT count(*) FROM anon.release_people x JOIN anon.release_secrets r USING (release_id)
                             WHERE x.release_id = %s AND x.person = sha256(decode(r.person_salt, 'hex')
                                                     || convert_to('1', 'UTF8'))""",
                          (release_id,)).fetchone()[0]
    assert person_1 == 1
    db.execute("SELECT anon.drop_release(%s)", (release,))
    assert db.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s", (release_id,)).fetchone()[0] == 0


def test_identifiers_that_do_not_tell_people_apart(db, schema):
    """A name is not a person: the default stays fresh, and the stable mode asked for refuses."""
    db.execute("CREATE TABLE named AS SELECT 'name' || i % 50 AS full_name, 20 + i % 40 AS age, "
               "'d' || i % 6 AS dx FROM generate_series(1, 200) i")
    release = create_release(db, "mondrian_view", schema, "named", k=4, l=2, quasi_identifiers=["age"],
                             sensitive=["dx"], identifiers=["full_name"])
    assert db.execute("SELECT parameters->>'refresh_mode' FROM anon.releases WHERE release_schema || '.' || "
                      "release_name = %s", (release,)).fetchone()[0] == "fresh"
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="150 rows share a value"):
        create_release(db, "mondrian_view", schema, "named", k=4, l=2, quasi_identifiers=["age"],
                       sensitive=["dx"], identifiers=["full_name"], refresh_mode="stable", release_name="s")


def test_nulls_in_a_ranged_qi_may_sit_in_any_class(db, schema):
    """A class of numbers and NULLs releases its numbers' range: an analyst cannot place a NULL,
    so a NULL's candidates are every class's that its other QIs fit. Stable by default, and
    refreshed without narrowing anyone (computed here with that rule)."""
    db.execute("""CREATE TABLE nulls (id int PRIMARY KEY, age int, sex text, dx text);
                  INSERT INTO nulls SELECT g, CASE WHEN g % 17 IN (3, 4) THEN NULL ELSE 20 + g % 40 END,
                         (ARRAY['F', 'M'])[1 + g % 2], (ARRAY['flu', 'hiv', 'cancer', 'cold'])[1 + g % 4]
                  FROM generate_series(1, 300) g""")
    release = create_release(db, "mondrian_view", schema, "nulls", k=5, l=2, quasi_identifiers=["age", "sex"],
                             sensitive=["dx"])
    db.execute("CREATE TABLE kept_n (version int, age int4range, sex text[], dx text[])")
    db.execute(f"INSERT INTO kept_n SELECT 0, age, sex, array_agg(DISTINCT dx) FROM {release} GROUP BY age, sex")
    db.execute("DELETE FROM nulls WHERE id % 23 = 0")
    db.execute("INSERT INTO nulls SELECT g, CASE WHEN g % 5 = 0 THEN NULL ELSE 20 + g % 40 END, 'F', 'cold' "
               "FROM generate_series(301, 310) g")
    db.execute("SELECT anon.refresh(%s)", (release,))
    db.execute(f"INSERT INTO kept_n SELECT 1, age, sex, array_agg(DISTINCT dx) FROM {release} GROUP BY age, sex")
    fewest = db.execute("""
        SELECT min(n) FROM (SELECT id, count(*) AS n FROM (
            SELECT p.id, v.dx FROM nulls p JOIN kept_n k
              ON (p.age IS NULL OR k.age @> p.age) AND p.sex = ANY(k.sex)
            CROSS JOIN LATERAL unnest(k.dx) AS v(dx)
            WHERE p.id <= 300 GROUP BY p.id, v.dx HAVING count(DISTINCT k.version) = 2) AS every_version
        GROUP BY id) AS per_person""").fetchone()[0]
    assert fewest >= 2


def test_a_release_whose_people_are_gone_is_not_refreshed_as_if_new(db, schema):
    db.execute(PATIENTS)
    release = create_release(db, "mondrian_view", schema, "patients", k=4, l=3, quasi_identifiers=QIS,
                             sensitive=["dx"], identifiers=["id"])
    db.execute("DELETE FROM anon.release_state WHERE release_id = (SELECT release_id FROM "
               "anon.releases WHERE release_schema || '.' || release_name = %s)", (release,))
    with pytest.raises(psycopg.errors.DataException, match="is gone"):
        db.execute("SELECT anon.refresh(%s)", (release,))


@pytest.mark.parametrize("models", [{"l_diversity": "entropy"}, {"l_diversity": "recursive", "c": 2}],
                         ids=["entropy", "recursive"])
def test_refreshes_group_by_the_l_model_the_release_asks_for(db, schema, models):
    """Classes are merged until they meet the release's own l model, which its verification
    then finds in the released rows (a model stricter than distinct l included)."""
    db.execute("""CREATE TABLE ent (id int PRIMARY KEY, age int, dx text);
                  INSERT INTO ent SELECT g, 20 + g % 50, (ARRAY['flu', 'hiv', 'cold', 'ok'])[1 + g % 4]
                  FROM generate_series(1, 200) g""")
    release = create_release(db, "mondrian_view", schema, "ent", k=4, l=2, quasi_identifiers=["age"],
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable", **models)
    db.execute("UPDATE ent SET dx = 'flu' WHERE id % 7 = 0")
    db.execute("SELECT anon.refresh(%s)", (release,))
    verified = db.execute("SELECT verified FROM anon.releases WHERE release_schema || '.' || release_name = %s",
                          (release,)).fetchone()[0]
    assert verified


def test_a_null_identifier_is_refused_in_the_stable_mode(db, schema):
    """A row without an identifier cannot be followed from version to version."""
    db.execute("""CREATE TABLE nid (id int, age int, dx text);
                  INSERT INTO nid SELECT g, 20 + g % 50, (ARRAY['flu', 'hiv', 'cold', 'ok'])[1 + g % 4]
                  FROM generate_series(1, 100) g""")
    db.execute("UPDATE nid SET id = NULL WHERE id = 7")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no value"):
        create_release(db, "mondrian_view", schema, "nid", k=4, l=2, quasi_identifiers=["age"],
                       sensitive=["dx"], identifiers=["id"], refresh_mode="stable")


def test_one_joiner_is_not_pinned_by_subtracting_two_versions(db, schema):
    """An analyst who keeps two versions and knows who is in the table subtracts a class's
    released values: when one person joins a class, the added value would be theirs."""
    db.execute("""CREATE TABLE dpx (id int PRIMARY KEY, age int, dx text);
                  INSERT INTO dpx SELECT g, g, (ARRAY['flu', 'hiv', 'cold', 'ok'])[1 + g % 4]
                  FROM generate_series(1, 40) g""")
    release = create_release(db, "mondrian_view", schema, "dpx", k=5, l=2, sensitive=["dx"])
    qis = {"age": "range"}
    before = keep_released_version(db, release, "dpx", "id", qis, "dx")
    db.execute("INSERT INTO dpx VALUES (41, 33, 'cancer')")
    db.execute("SELECT anon.refresh(%s)", (release,))
    after = keep_released_version(db, release, "dpx", "id", qis, "dx")
    assert pinned_by_difference(before, after) == {}
    assert min(class_sizes(db, release, ["age"])) >= 5
    across = db.execute("SELECT verification->'across_versions' FROM anon.releases "
                        "WHERE release_schema || '.' || release_name = %s", (release,)).fetchone()[0]
    assert across["held_back"] == 1 and across["unsafe_differences"] == 0


def test_a_leaver_is_kept_absent_and_their_value_kept_until_the_class_can_change(db, schema):
    """A person who leaves a class of five stays in the release's state, marked absent (one who
    comes back is the same person to an analyst); the class keeps their published value as a
    counterfeit row (with one less it would break k, and its one removed value would be
    theirs), so no pair of versions pins them."""
    db.execute("""CREATE TABLE lv (id int PRIMARY KEY, age int, dx text);
                  INSERT INTO lv SELECT g, g, (ARRAY['flu', 'hiv', 'cold', 'ok'])[1 + g % 4]
                  FROM generate_series(1, 40) g""")
    release = create_release(db, "mondrian_view", schema, "lv", k=5, l=2, sensitive=["dx"])
    qis = {"age": "range"}
    before = keep_released_version(db, release, "lv", "id", qis, "dx")
    release_id = db.execute("SELECT release_id FROM anon.releases WHERE release_schema || '.' || release_name = %s",
                            (release,)).fetchone()[0]
    db.execute("DELETE FROM lv WHERE id = 33")
    db.execute("SELECT anon.refresh(%s)", (release,))
    after = keep_released_version(db, release, "lv", "id", qis, "dx")
    assert pinned_by_difference(before, after) == {}
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 40
    kept = db.execute("""SELECT x.last_version FROM anon.release_people x
                         WHERE x.release_id = %s AND x.person = sha256(
                             decode(anon._release_salt(x.release_id), 'hex') || convert_to('33', 'UTF8'))""",
                      (release_id,)).fetchall()
    # in the state once, marked absent: last in the table in the first version
    assert kept == [(0,)]
    across = db.execute("SELECT across_versions FROM anon.refresh_history WHERE release_id = %s "
                        "ORDER BY refresh_id DESC LIMIT 1", (release_id,)).fetchone()[0]
    assert across["counterfeit"] == 1 and across["absent"] == 1 and across["unsafe_differences"] == 0


def test_the_stable_mode_writes_classes_from_the_values_read(db, schema):
    """A group publishes the values earlier versions showed (counterfeits): a release that joins
    its rows back to the source cannot, so it is refused asked for, and fresh by default."""
    db.execute(PATIENTS)
    db.execute("SET plpy_anon.join_back = on")        # on the shared connection: reset below
    try:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="join its rows back"):
            create_release(db, "mondrian_view", schema, "patients", k=4, l=3, quasi_identifiers=QIS,
                           sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
        release = create_release(db, "mondrian_view", schema, "patients", k=4, l=3,
                                 quasi_identifiers=QIS, sensitive=["dx"], identifiers=["id"])
    finally:
        db.execute("RESET plpy_anon.join_back")
    assert db.execute("SELECT parameters->>'refresh_mode' FROM anon.releases WHERE release_schema || '.' || "
                      "release_name = %s", (release,)).fetchone()[0] == "fresh"


def test_texts_beyond_ascii_and_nulls_are_the_values_the_check_counts(db, schema):
    """A set QI and a sensitive column of texts beyond ASCII and NULLs: the check counts each
    person's candidates as the released rows give them (the test's own SQL: the distinct non-NULL
    values of the classes whose range holds their age and whose set their city, NULL a value of
    its own), and a refresh after churn is checked and published."""
    db.execute("""CREATE TABLE texts (id int PRIMARY KEY, age int, city text, dx text);
                  INSERT INTO texts SELECT g, 20 + g % 50,
                         (ARRAY['Zürich', 'São Paulo', '東京', NULL, 'Reykjavík'])[1 + g % 5],
                         (ARRAY['café', 'naïve', 'straße', '東京', NULL, 'plain'])[1 + (g / 5) % 6]
                  FROM generate_series(1, 400) g""")
    release = create_release(db, "mondrian_view", schema, "texts", k=5, l=2,
                             quasi_identifiers=["age", "city"], sensitive=["dx"],
                             identifiers=["id"], refresh_mode="stable")
    fewest = db.execute(f"""
        SELECT min(n) FROM (SELECT p.id, count(DISTINCT k.dx) AS n FROM texts p JOIN {release} k
              ON k.age @> p.age AND pg_catalog.array_position(k.city, p.city) IS NOT NULL
            GROUP BY p.id) AS per_person""").fetchone()[0]
    across = db.execute("SELECT verification -> 'across_versions' FROM anon.release_status() "
                        "WHERE release = %s", (release,)).fetchone()[0]
    assert across["fewest_candidates"] == fewest >= 2
    db.execute("DELETE FROM texts WHERE id % 19 = 0")
    db.execute("INSERT INTO texts SELECT g, 20 + g % 50, 'Zürich', 'naïve' "
               "FROM generate_series(401, 420) g")
    db.execute("SELECT anon.refresh(%s)", (release,))
    assert min(distinct_sensitive_per_class(db, release, ["age", "city"], "dx")) >= 2
