"""Privacy by default: anon.detect_identifiers, and releases refusing undeclared columns that look
identifying (the issue: an undeclared, non-unique full_name was published as sets of real names)."""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.helpers import release_schema_of

PATIENTS = """
CREATE TABLE patients (patient_id int PRIMARY KEY, full_name text NOT NULL, age int, sex text,
                       zip text, diagnosis text);
INSERT INTO patients
SELECT i, (ARRAY['Alice', 'Bruno', 'Chloé', 'David', 'Emma', 'Farid'])[1 + i % 6] || ' ' ||
          (ARRAY['Martin', 'Dupont', 'Nguyen', 'Smith', 'Garcia', 'Okafor', 'Rossi'])[1 + i % 7],
       20 + (i * 37) % 60, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 6)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, 120) i;
"""


def nir(body: str) -> str:
    return f"{body}{97 - int(body) % 97:02d}"


def detected(db, table, **kw) -> dict:
    args = ", ".join(f"{k} => %s" for k in kw)
    rows = db.execute(f"SELECT column_name, data_type, kind, confidence, evidence, declared_role, "
                      f"blocks_release FROM anon.detect_identifiers(%s{', ' if kw else ''}{args})",
                      (table, *kw.values())).fetchall()
    return {(r[0], r[2]): r for r in rows}


def released_text(db, relation) -> str:
    """Every released value of the relation as one text (independent of the release code)."""
    rows = db.execute(sql.SQL("SELECT t::text FROM {} t").format(sql.SQL(relation))).fetchall()
    return "\n".join(r[0] for r in rows)


def test_undeclared_full_name_refuses_the_release_and_leaves_nothing(db, schema):
    db.execute(PATIENTS)
    assert db.execute("SELECT count(DISTINCT full_name) < count(*) FROM patients").fetchone()[0]
    before = db.execute("SELECT count(*) FROM anon.releases").fetchone()[0]
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT anon.mondrian_view('patients', k => 5, release_name => 'p5', "
                   "release_schema => %s)", (release_schema_of(schema),))
    error = info.value
    assert error.sqlstate == "42P10"
    assert '"full_name"' in error.diag.message_primary
    assert error.diag.message_primary.startswith(f"table {schema}.patients has undeclared")
    assert "plpy.Error" not in error.diag.message_primary
    assert "fullname" in error.diag.message_detail and "name (high)" in error.diag.message_detail
    assert f"SELECT anon.set_column_role('{schema}.patients', 'full_name', 'identifier');" \
        in error.diag.message_hint
    assert "quasi_identifiers => ARRAY" in error.diag.message_hint
    # only full_name: patient_id is a unique key (dropped), the others are harmless
    assert '"patient_id"' not in error.diag.message_primary and '"zip"' not in error.diag.message_primary
    # nothing half-built
    assert db.execute("SELECT count(*) FROM anon.releases").fetchone()[0] == before
    assert db.execute("SELECT to_regclass(%s)", (f"{release_schema_of(schema)}.p5",)).fetchone()[0] is None


def test_declared_role_or_explicit_list_overrides(db, schema):
    db.execute(PATIENTS)
    names = [r[0] for r in db.execute("SELECT DISTINCT full_name FROM patients").fetchall()]
    # an explicit quasi_identifiers list: full_name is not in it, so it is not released
    rel = db.execute("SELECT anon.mondrian_view('patients', k => 5, quasi_identifiers => "
                     "ARRAY['age', 'sex'], release_name => 'listed', release_schema => %s)",
                     (release_schema_of(schema),)).fetchone()[0]
    text = released_text(db, rel)
    assert not any(n in text for n in names)
    # naming it as an identifier in the call
    rel = db.execute("SELECT anon.mondrian_view('patients', k => 5, identifiers => "
                     "ARRAY['full_name'], release_name => 'named', release_schema => %s)",
                     (release_schema_of(schema),)).fetchone()[0]
    assert not any(n in released_text(db, rel) for n in names)
    # a declared role
    db.execute("SELECT anon.set_column_role('patients', 'full_name', 'identifier')")
    rel = db.execute("SELECT anon.mondrian_view('patients', k => 5, release_name => 'declared', "
                     "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    assert not any(n in released_text(db, rel) for n in names)
    cols = [r[0] for r in db.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0", (rel,))]
    assert "full_name" not in cols and "zip" in cols
    # a refresh re-uses the recorded roles (no new check), even after the declaration is removed
    db.execute("SELECT anon.set_column_role('patients', 'full_name', NULL)")
    db.execute("SELECT anon.refresh(%s)", (rel,))
    assert not any(n in released_text(db, rel) for n in names)


def test_every_generalizing_method_checks(db, schema):
    db.execute(PATIENTS)
    for call in (("SELECT anon.break_merge('patients', k => 3, sensitive => ARRAY['diagnosis'], "
                 "release_schema => %s)"),
                 ("SELECT anon.mondrian_view('patients', k => 5, "
                 "priorities => '{\"age\": 1}'::jsonb, release_schema => %s)")):
        with pytest.raises(psycopg.Error) as info:
            db.execute(call, (schema,))
        assert info.value.sqlstate == "42P10" and "full_name" in info.value.diag.message_primary


DETECT = """
CREATE TABLE people (
    id serial, "Full Name" text, "EMail" text, phone text, ssn text, "numéro" text, notes text,
    ref text, salary int, seen timestamptz, sex text, country text, diagnosis text, card text,
    contact text);
---
INSERT INTO people ("Full Name", "EMail", phone, ssn, "numéro", notes, ref, salary, seen, sex,
                    country, diagnosis, card, contact)
SELECT (ARRAY['Alice', 'Bruno', 'Chloé', 'David'])[1 + i %% 4] || ' ' || 'Mart' || chr(97 + i %% 26)
           || 'n' || chr(97 + i / 26),
       'user' || i || '@example.org',
       '+33 6 12 ' || lpad((i / 100)::text, 2, '0') || ' ' || lpad((i %% 100)::text, 2, '0') || ' 00',
       (100 + i) || '-45-' || (1000 + i),
       (%(nirs)s::text[])[1 + i %% 50],
       'came in on day ' || i || ' complaining of a headache and mild fever',
       'REF-' || md5(i::text),
       30000 + i * 7, timestamptz '2024-01-01' + i * interval '1 minute',
       CASE WHEN i %% 2 = 0 THEN 'F' ELSE 'M' END,
       (ARRAY['France', 'Italy', 'Spain'])[1 + i %% 3],
       (ARRAY['flu', 'asthma', 'gout', 'type 2 diabetes'])[1 + i %% 4],
       '4111 1111 1111 1111',
       (ARRAY['Lyon', 'Paris'])[1 + i %% 2]
FROM generate_series(1, 300) i;
"""


def test_detect_identifiers_output(db, schema):
    nirs = [nir(f"1{80 + i % 20:02d}{1 + i % 12:02d}75{100 + i:03d}{200 + i:03d}") for i in range(50)]
    create, insert = DETECT.split("---")
    db.execute(create.replace("%%", "%"))
    db.execute(insert, {"nirs": nirs})
    db.execute("SELECT anon.set_column_role('people', 'ssn', 'identifier')")
    got = detected(db, "people")
    assert got[("Full Name", "name")][6] is True
    assert got[("Full Name", "name")][3] == "high"
    assert got[("EMail", "email")][3] == "high" and got[("EMail", "email")][6]
    assert got[("phone", "phone")][3] == "high"
    ssn = got[("ssn", "national_id")]
    assert ssn[5] == "identifier" and ssn[6] is False       # declared: reported, not blocking
    assert "NIR" in got[("numéro", "national_id")][4] and got[("numéro", "national_id")][6]
    assert got[("notes", "free_text")][6]
    assert got[("ref", "near_unique")][6] and got[("ref", "near_unique")][1] == "text"
    assert "Luhn" in got[("card", "national_id")][4]
    for col in ("salary", "seen"):
        assert got[(col, "near_unique_number")][6] is False
    flagged = {c for c, _ in got}
    assert not flagged & {"sex", "country", "diagnosis", "contact"}
    blockers = {c for (c, _), r in got.items() if r[6]}
    assert blockers == {"Full Name", "EMail", "phone", "numéro", "notes", "ref", "card"}
    # a release of the table names exactly those columns
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT anon.mondrian_view('people', k => 5, release_schema => %s)", (release_schema_of(schema),))
    message = info.value.diag.message_primary
    for col in blockers:
        assert f'"{col}"' in message
    assert '"salary"' not in message and '"ssn"' not in message
    # a small sample still finds the formats
    small = detected(db, "people", sample_size=30)
    assert ("EMail", "email") in small and ("phone", "phone") in small


def test_quoted_mixed_case_table_and_empty_table(db, schema):
    db.execute('CREATE TABLE "Odd Table" ("Prénom" text, "Weird""Col" text, age int)')
    got = detected(db, f'{schema}."Odd Table"')
    assert got[("Prénom", "name")][6] is True
    assert got[("Prénom", "name")][3] == "medium"      # by name alone: no values to confirm
    assert not [k for k in got if k[0] in ('Weird"Col', "age")]
    with pytest.raises(psycopg.Error) as info:
        db.execute("""SELECT anon.mondrian_view('"Odd Table"', k => 2, release_schema => %s)""",
                   (release_schema_of(schema),))
    assert info.value.sqlstate == "42P10"
    assert f"""anon.set_column_role('{schema}."Odd Table"', 'Prénom', 'identifier')""" \
        in info.value.diag.message_hint


def test_null_and_bad_arguments(db, schema):
    db.execute("CREATE TABLE t (a text)")
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT * FROM anon.detect_identifiers(NULL)")
    assert info.value.sqlstate == "22023" and "source must not be NULL" in str(info.value)
    for bad in (0, -5):
        with pytest.raises(psycopg.Error) as info:
            db.execute("SELECT * FROM anon.detect_identifiers('t', %s::int)", (bad,))
        assert info.value.sqlstate == "22023" and "sample_size" in str(info.value)
    # NULL for an argument with a default means the default, as for every function of anon
    db.execute("INSERT INTO t SELECT 'x' || g FROM generate_series(1, 5) g")
    assert db.execute("SELECT count(*) FROM anon.detect_identifiers('t', NULL)").fetchone()[0] \
        == db.execute("SELECT count(*) FROM anon.detect_identifiers('t')").fetchone()[0]
    with pytest.raises(psycopg.errors.UndefinedTable):
        db.execute("SELECT * FROM anon.detect_identifiers('no_such_table')")


def test_unprivileged_role_cannot_call_it(db, connect, schema):
    db.execute("CREATE TABLE secret (full_name text)")
    db.execute("INSERT INTO secret VALUES ('Alice Martin')")
    role = f"{schema}_nobody"[:63]
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        with connect(user=role) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM anon.detect_identifiers(%s)", (f"{schema}.secret",))
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_large_table_uses_a_block_sample(db, schema):
    db.execute("CREATE TABLE big AS SELECT i, 'user' || i || '@example.org' AS contact, "
               "(ARRAY['a', 'b', 'c'])[1 + i % 3] AS grp FROM generate_series(1, 60000) i")
    db.execute("ANALYZE big")
    got = detected(db, "big", sample_size=500)
    assert got[("contact", "email")][6] and got[("contact", "near_unique")][6]
    assert not [k for k in got if k[0] == "grp"]
