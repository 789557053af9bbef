"""Adversarial: the people a stable release keeps (anon.release_state.persons) are the salted
SHA-256 of each identifier's text, recomputed here in SQL by PostgreSQL's own sha256() from the
release's salt and ``id::text``, for identifiers at the hash's padding edges (every length of the
salt and text from 0 to 130 bytes), in several scripts, holding the marks and separators the
stable mode's joined reads use, numeric-looking texts with leading zeros, and integers at their
types' limits; with the compiled kernels loaded in the refreshing backend (as after any build of
50,000 rows or more). People who leave stay in the state (marked absent) and come back to the
same hash; the released rows keep k and l at every version."""
from __future__ import annotations

import pytest
from psycopg import sql

from tests.helpers import class_sizes, create_release, distinct_sensitive_per_class

TEXT_IDS = ["x" * n for n in range(131)] + [
    "é" * 28, "é" * 32, "€" * 19, "𝄞" * 14, "𝄞" * 16, "07", "7", "0007", " 7", "7 ", "-0",
    "NULL", "null", ",", '"', "\\", "{", "}", "{}", "{a,b}", "a,b", '"a"', "\x01", "\x02",
    "\x1f", "a\x01b", "\x7f", "\u2028", "\ufeff", "ß", "ＡＢＣ", "y" * 1000]
INT8_IDS = [-2**63, -2**63 + 1, 2**63 - 1, 2**63 - 2, -1, 0, 1, 7, 10, -10, 99, 100, 2**31,
            -2**31 - 1, 10**18, -10**18] + list(range(1000, 1150))
INT2_IDS = [-32768, 32767, -1, 0, 7, 70] + list(range(-200, -50))

CASES = {"text": ("text", TEXT_IDS), "int8": ("int8", INT8_IDS), "int2": ("int2", INT2_IDS)}


def persons_in_state(db, rel: str) -> set[bytes]:
    (persons,) = db.execute(
        "SELECT s.persons FROM anon.release_state s JOIN anon.releases r USING (release_id) "
        "WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s", (rel,)).fetchone()
    return {bytes(persons[i:i + 32]) for i in range(0, len(persons), 32)}


def hashes_in_sql(db, rel: str, ever: str) -> set[bytes]:
    rows = db.execute(sql.SQL(
        "SELECT sha256(decode(anon._release_salt(r.release_id), 'hex') || convert_to(e.id::text, 'UTF8')) "
        "FROM {} e, anon.releases r WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s")
        .format(sql.Identifier(ever)), (rel,)).fetchall()
    return {bytes(h) for (h,) in rows}


@pytest.mark.parametrize("case", list(CASES))
def test_the_state_holds_each_persons_salted_sha256_of_their_identifiers_text(db, schema, case):
    kind, ids = CASES[case]
    # the kernels loaded in this backend, as a large build leaves them
    db.execute("SELECT * FROM anon.versions()").fetchall()
    db.execute("DO LANGUAGE plpython3u $$ from plpy_anon.core import mondrian_jit; "
               "assert mondrian_jit.kernels() is not None $$")
    db.execute(sql.SQL("CREATE TABLE pt (id {} PRIMARY KEY, age int, zip int, dx text)")
               .format(sql.SQL(kind)))
    db.execute(sql.SQL("CREATE TABLE ever (id {} PRIMARY KEY)").format(sql.SQL(kind)))
    with db.cursor() as cur:
        cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)",
                        [(v, 20 + i % 13, i % 3, ["flu", "hiv", "cold"][(i // 3) % 3])
                         for i, v in enumerate(ids)])
    db.execute("INSERT INTO ever SELECT id FROM pt")
    qis = ["age", "zip"]
    rel = create_release(db, "mondrian_view", schema, "pt", k=2, l=2, quasi_identifiers=qis,
                         sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    steps = [
        "DELETE FROM pt WHERE age % 3 = 0",                          # leave
        None,                                                           # stay away a version
        "INSERT INTO pt SELECT * FROM gone",                            # come back
        "DELETE FROM pt WHERE age % 2 = 0",                            # some leave again
        "INSERT INTO pt SELECT id, age + 1, zip, dx FROM gone",         # back with other QIs
    ]
    db.execute("CREATE TABLE gone (LIKE pt)")
    for step in [None] + steps:
        if step and step.startswith("DELETE"):
            db.execute("TRUNCATE gone")
            db.execute("INSERT INTO gone SELECT * FROM pt WHERE " + step.split("WHERE ")[1])
        if step:
            db.execute(step)
        db.execute("SELECT anon.refresh(%s)", (rel,))
        assert persons_in_state(db, rel) == hashes_in_sql(db, rel, "ever")
        assert min(class_sizes(db, rel, qis)) >= 2
        assert min(distinct_sensitive_per_class(db, rel, qis, "dx")) >= 2
    # the refreshes wrote the state's arrays on the compiled kernels
    db.execute("DO LANGUAGE plpython3u $$ from plpy_anon.core import mondrian_jit; "
               "assert mondrian_jit._loaded.get('_person_kernels') is not None $$")
