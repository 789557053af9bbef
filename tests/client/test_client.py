"""plpy_anon.client against the real extension: every property is checked from the database's
own rows (or the DataFrame against them), and errors arrive typed with the server's text."""
from __future__ import annotations

import pandas as pd
import pytest

from plpy_anon.client import AnonClient, errors
from plpy_anon.core import errors as core_errors
from tests.helpers import release_schema_of

TABLE = """
CREATE TABLE patients (id int PRIMARY KEY, name text, age int, sex text, zip text, diagnosis text);
INSERT INTO patients
SELECT i, 'name ' || i, 20 + (i * 37) % 60, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 6)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, 90) i;
-- "name" would otherwise be refused as an undeclared identifying column (privacy by default)
SELECT anon.set_column_role('patients', 'name', 'identifier');
"""

ZIP_HIERARCHY = "".join(f"5370{i};5370*;537**;*\n" for i in range(6))


@pytest.fixture
def anon(db, schema):
    db.execute(TABLE)
    return AnonClient(connection=db)


def dsn(pg_server) -> str:
    return " ".join(f"{k}={v}" for k, v in pg_server.items())


def test_declare_then_release_then_frame(anon, db, schema, tmp_path):
    roles = anon.declare("patients", identifiers=["name"], sensitive=["diagnosis"])
    declared = dict(zip(roles["column_name"], roles["role"]))
    assert declared["name"] == "identifier" and declared["diagnosis"] == "sensitive"
    assert declared["age"] == "quasi_identifier"                  # the documented default
    csv_file = tmp_path / "zip.csv"
    csv_file.write_text(ZIP_HIERARCHY)
    assert anon.load_hierarchy_csv("patients", "zip", csv_file) == 6
    rel = anon.mondrian_view("patients", k=5, release_schema=release_schema_of(schema))
    assert rel == f"{release_schema_of(schema)}.patients_k5"
    frame = anon.release_frame(rel)
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["age", "sex", "zip", "diagnosis"]   # identifier dropped
    assert len(frame) == 90
    classes = frame.assign(age=frame["age"].astype(str), sex=frame["sex"].astype(str)) \
                   .groupby(["age", "sex", "zip"]).size()
    assert classes.min() >= 5                                   # k-anonymous, counted client-side
    assert set(frame["zip"]) <= {"5370*", "537**", "*"} | {f"5370{i}" for i in range(6)}
    assert sorted(frame["diagnosis"]) == sorted(r[0] for r in db.execute("SELECT diagnosis FROM patients"))


def test_a_hierarchy_path_that_is_not_here_is_named_with_the_directory(anon, db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(errors.InvalidParameter) as raised:
        anon.load_hierarchy_csv("patients", "zip", "zip_hierarchy.csv")
    assert raised.value.message == f"no hierarchy file 'zip_hierarchy.csv' in {tmp_path}"
    assert "absolute path" in raised.value.hint and "leaf;parent;...;*" in raised.value.hint
    (tmp_path / "zip_hierarchy.csv").write_text(ZIP_HIERARCHY)
    assert anon.load_hierarchy_csv("patients", "zip", "zip_hierarchy.csv") == 6   # found here
    with pytest.raises(errors.UndefinedObject) as raised:     # one line of text reaches the server
        anon.load_hierarchy_csv("patients", "zip", "53700;5370*;537**;*")
    assert "does not cover 5 value(s)" in raised.value.message


def test_list_inspect_refresh_report_drop(anon, db, schema):
    rel = anon.mondrian_view("patients", k=4, quasi_identifiers=["age", "sex"], release_name="r",
                             release_schema=release_schema_of(schema))
    listed = anon.releases()
    assert rel in set(listed["release"])
    assert anon.release(rel)["row_count"] == 90
    db.execute("INSERT INTO patients SELECT i, 'n', 33, 'F', '53701', 'flu' FROM generate_series(91, 99) i")
    row = anon.refresh(rel)
    assert row["row_count"] == 99 and row["last_error"] is None
    assert len(anon.release_frame(rel)) == 99
    report = anon.release_report(rel)
    assert len(report) == 1 and int(report["achieved_k"].iloc[0]) >= 4
    audit = anon.release_audit(rel)
    assert list(audit["release"]) == [rel] and int(audit["versions"].iloc[0]) == 2
    assert int(audit["achieved_k"].iloc[0]) == int(report["achieved_k"].iloc[0])
    assert anon.drop_release(rel) is True
    assert anon.drop_release(release=rel, if_exists=True) is False
    assert rel not in set(anon.releases()["release"])


def test_errors_are_typed_and_carry_the_server_text(anon, schema):
    with pytest.raises(errors.InvalidParameter) as info:
        anon.mondrian_view("patients", k=1, release_schema=release_schema_of(schema))
    assert info.value.sqlstate == "22023"
    assert "k must be at least 2" in info.value.message and info.value.hint
    assert isinstance(info.value, core_errors.InvalidParameter)    # catchable as the core's error
    with pytest.raises(errors.UndefinedObject):
        anon.mondrian_view("no_such_table", k=2)
    with pytest.raises(errors.InsufficientData):
        anon.mondrian_view("patients", k=500, release_schema=release_schema_of(schema))
    anon.mondrian_view("patients", k=3, release_schema=release_schema_of(schema))
    with pytest.raises(errors.DuplicateObject, match="already exists"):
        anon.mondrian_view("patients", k=3, release_schema=release_schema_of(schema))
    with pytest.raises(errors.UndefinedObject, match="does not exist"):
        anon.release_frame("no_such_release")


def test_permission_denied_for_an_analyst(db, connect, schema, anon):
    db.execute("CREATE ROLE client_analyst LOGIN")
    try:
        with connect(user="client_analyst") as conn, pytest.raises(errors.PermissionDenied):
            AnonClient(connection=conn).mondrian_view("patients", k=3)
    finally:
        db.execute("DROP ROLE client_analyst")


def test_progress_reports_the_phases_of_a_create_and_a_refresh(pg_server, db, schema):
    db.execute(TABLE)
    created, refreshed = [], []
    with AnonClient(dsn(pg_server), progress=created.append) as anon:
        rel = anon.mondrian_view(f"{schema}.patients", k=3, release_schema=release_schema_of(schema))
        anon.progress = refreshed.append
        anon.refresh(rel)
        assert anon.extension_version() == anon.install()          # already there: unchanged
    assert created[0] == f"creating {release_schema_of(schema)}.patients_k3 (mondrian)"
    assert created[1].startswith("read the source (")
    anonymized = next(p for p in created if p.startswith("anonymized: "))
    classes = db.execute(f"SELECT count(*) FROM (SELECT 1 FROM {rel} GROUP BY age, sex, zip) c").fetchone()[0]
    assert anonymized.startswith(f"anonymized: 90 rows, {classes} classes (")
    assert created[-2:] == ["checking the released rows", created[-1]] and created[-1].startswith("done: 90 rows, k = ")
    assert refreshed[0].startswith(f"refreshing {release_schema_of(schema)}.patients_k3")
    assert any("building" in p for p in refreshed) and any("swapping" in p for p in refreshed)
    assert refreshed[-1].startswith("done: 90 rows")


def test_named_arguments_left_out_take_the_server_defaults(anon, db, schema):
    rel = anon.mondrian_view("patients", k=3, release_schema=release_schema_of(schema), l=None, replace=None)
    params = db.execute("SELECT parameters FROM anon.releases WHERE release_schema = %s", (release_schema_of(schema),)).fetchone()[0]
    assert params["l"] is None and params["k"] == 3 and rel.endswith("patients_k3")


def test_priorities_pick_the_prioritized_overload(anon, schema):
    rel = anon.mondrian_view("patients", k=4, priorities={"age": 1, "sex": 0.5}, release_schema=release_schema_of(schema))
    row = anon.release(rel)
    assert row["method"] == "prioritized_mondrian"
    weights = row["parameters"]["priorities"]
    assert weights["age"] > weights["sex"]                      # the dict went through as jsonb
    with pytest.raises(errors.UndefinedObject, match="no learned priorities"):
        anon.mondrian_view("patients", k=4, priorities="learned", release_schema=release_schema_of(schema),
                           release_name="learned")            # the text overload: nothing learned yet


def test_set_hierarchy_pads_ragged_paths(anon, db):
    n = anon.set_hierarchy("patients", "sex", [["F", "*"], ["M", "person", "*"]])
    assert n == 2
    rows = db.execute("SELECT leaf, path FROM anon.hierarchies WHERE source = 'patients'::regclass "
                      "ORDER BY leaf").fetchall()
    assert rows == [("F", ["F", "*"]), ("M", ["M", "person", "*"])]


def test_load_queries_feeds_the_workload_store(anon, db, tmp_path):
    log = tmp_path / "postgresql.log"
    log.write_text(
        "2026-11-21 10:00:00.000 UTC [7] LOG:  statement: SELECT age, sex FROM patients WHERE age > 40\n"
        "2026-11-21 10:00:01.000 UTC [7] LOG:  statement: SELECT age, sex FROM patients WHERE age > 40\n"
        "2026-11-21 10:00:02.000 UTC [7] LOG:  statement: SELECT zip FROM patients WHERE sex = 'F'\n"
        "2026-11-21 10:00:03.000 UTC [7] LOG:  checkpoint starting: time\n")
    before = db.execute("SELECT coalesce(sum(frequency), 0) FROM anon.workload").fetchone()[0]
    result = anon.load_queries(log)
    assert (result.statements, result.skipped_entries) == (3, 1)
    after = db.execute("SELECT coalesce(sum(frequency), 0) FROM anon.workload").fetchone()[0]
    assert after - before == 3
    with pytest.raises(errors.UndefinedObject, match="does not exist"):
        anon.load_queries(tmp_path / "missing.log")


def test_connection_errors_are_typed():
    with pytest.raises(errors.ConnectionFailed):
        AnonClient("host=/nonexistent dbname=x connect_timeout=1")
    with pytest.raises(errors.InvalidParameter):
        AnonClient()


def test_risk_report_is_a_frame_of_the_sql_rows(anon, db, schema):
    frame = anon.risk_report("patients", quasi_identifiers=["age", "sex", "zip"], sensitive=["diagnosis"],
                             risk_threshold=0.5)
    assert list(frame.columns) == ["measure", "column_name", "value", "detail"]
    sizes = pd.DataFrame(db.execute("SELECT age, sex, zip FROM patients").fetchall()).value_counts()
    figures = frame.set_index(["measure", frame["column_name"].fillna("")])["value"]
    assert figures[("rows", "")] == 90
    assert figures[("classes", "")] == len(sizes)
    assert figures[("smallest_class", "")] == sizes.min()
    assert figures[("prosecutor_records_at_risk", "")] == sizes[1 / sizes > 0.5].sum()
    assert figures[("distinct_l", "diagnosis")] >= 1
    with pytest.raises(errors.UndefinedObject):
        anon.risk_report("patients", quasi_identifiers=["nope"])


def test_release_frame_reads_only_a_release_of_the_caller_or_a_superuser(pg_server, db, schema, connect):
    import psycopg as pg

    from plpy_anon.client import errors as client_errors
    role = "frame_custodian"
    db.execute(f"DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; GRANT plpy_anon_custodian TO {role}")
    db.execute(pg.sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(pg.sql.Identifier(db.info.dbname),
                                                                     pg.sql.Identifier(role)))
    try:
        with connect(user=role) as conn:
            conn.execute(f"CREATE SCHEMA {role}_data; CREATE TABLE {role}_data.t (id int PRIMARY KEY, age int, zip text)")
            conn.execute(f"INSERT INTO {role}_data.t SELECT g, g % 40, 'z' || g % 5 FROM generate_series(1, 100) g")
            rel = conn.execute(f"SELECT anon.mondrian_view('{role}_data.t', k => 5, identifiers => '{{id}}', "
                               f"release_schema => '{role}_rel')").fetchone()[0]
            assert len(AnonClient(connection=conn).release_frame(rel)) == 100       # its owner reads it
        with pytest.raises(client_errors.PermissionDenied, match=f"belongs to {role}"):
            AnonClient(connection=db).release_frame(rel)
        with connect() as dba:        # the superuser who logged in is who planned code can become
            dba.execute(f"SET SESSION AUTHORIZATION {role}")
            with pytest.raises(client_errors.PermissionDenied, match=f"belongs to {role}"):
                AnonClient(connection=dba).release_frame(rel)
    finally:
        db.execute(f"SELECT anon.drop_release('{role}_rel.t_k5', if_exists => true)")
        db.execute(f"DROP SCHEMA IF EXISTS {role}_rel CASCADE; DROP SCHEMA IF EXISTS {role}_data CASCADE")
        db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (f"{role}_rel",))
        db.execute(pg.sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(pg.sql.Identifier(db.info.dbname),
                                                                            pg.sql.Identifier(role)))
        db.execute(f"DROP OWNED BY {role} CASCADE; DROP ROLE {role}")
