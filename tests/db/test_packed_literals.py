"""A partitioning run hands each column's class literals back to SQL packed into one text
(plpy_anon.db.generalization.pack_literals; anon.partition_slice.literals), split by
string_to_table in the release's query (literal_rows). Whatever the literals hold (the
separators themselves, quotes, commas, backslashes, the empty string, NULL, any character), SQL
must read back exactly the literals packed, in order; a release made before keeps the jsonb its
query reads."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from plpy_anon.db.generalization import SEPARATORS, NoSeparator, literal_rows, pack_literals
from tests.helpers import create_release

# any text PostgreSQL can hold: no NUL, no lone surrogate
TEXTS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)


def read_back(db, literals: list[str | None]) -> list[str | None]:
    """The literals as the release's query reads them: packed, then split by SQL."""
    text, marks = pack_literals(literals)
    rows = db.execute(f"""
        SELECT x.v FROM (SELECT %s::bytea[] AS literals, %s::text AS separators) AS s,
        ROWS FROM ({literal_rows("s", 1)}) WITH ORDINALITY AS x(v, n)
        WHERE x.n > 1 ORDER BY x.n""", ([text], marks)).fetchall()
    return [v for (v,) in rows]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(literals=st.lists(st.one_of(st.none(), TEXTS), min_size=1, max_size=8))
@example(literals=[""])                     # one empty literal: string_to_table makes no row of ''
@example(literals=[None])
@example(literals=[SEPARATORS, "", None, '{"a,b",NULL,"c\\\\d"}'])    # every first choice taken
@example(literals=["[1,2]", "{x}", SEPARATORS[0]])
def test_packed_literals_read_back_in_sql_exactly(db, literals):
    assert read_back(db, literals) == literals


def test_separators_are_found_among_every_character_when_ordinary_ones_are_taken():
    held = "".join(chr(c) for c in range(1, 0xD800) if chr(c) not in "ab")
    text, marks = pack_literals([held, None])
    assert marks == "ab" and text.decode() == "a" + held + "ab"


def test_separators_of_a_server_encoding_other_than_utf8_are_ascii():
    held = "".join(chr(c) for c in range(1, 256) if chr(c) not in "\x05\x7f")
    text, marks = pack_literals([held, None], any_character=False)
    assert marks == "\x05\x7f" and text.decode() == "\x05" + held + "\x05\x7f"
    with pytest.raises(NoSeparator) as refused:
        pack_literals(["".join(map(chr, range(1, 128))), "\u0100"], any_character=False)
    assert refused.value.sqlstate == "54000" and "every ASCII character" in str(refused.value)


def test_literals_holding_every_character_are_refused_clearly():
    everything = "".join(map(chr, [*range(1, 0xD800), *range(0xE000, 0x110000)]))
    with pytest.raises(NoSeparator) as refused:
        pack_literals([everything[:600000], everything[600000:]])
    assert refused.value.sqlstate == "54000" and "every Unicode character" in str(refused.value)


PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, zip text, diagnosis text);
INSERT INTO people
SELECT i, 20 + i % 40, CASE WHEN i % 13 = 0 THEN NULL ELSE 'z' || (i * 7) % 30 END,
       (ARRAY['flu', 'with "quotes"', 'comma, here', E'back\\\\slash', '', NULL])[1 + i % 6]
FROM generate_series(1, 300) i;
"""


def test_a_release_made_before_gets_the_jsonb_its_query_reads(db, schema):
    """Its parameters lack packed_literals: its run fills ``classes``, with the literals a
    packed run hands back, and no ``literals``."""
    db.execute(PEOPLE)
    rel = create_release(db, "mondrian_view", schema, "people", k=5, quasi_identifiers=["age", "zip"],
                         sensitive=["diagnosis"])
    release_id = db.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                            "release_name) = %s", (rel,)).fetchone()[0]

    def slices():
        with db.transaction():      # the run's order is random at each call: one call, both forms
            return db.execute("SELECT first_class, classes, literals, separators "
                              "FROM anon._mondrian_partition_slices(%s)", (release_id,)).fetchall()

    packed = slices()
    assert all(classes is None and literals for _, classes, literals, _ in packed)
    db.execute("UPDATE anon.releases SET parameters = parameters - 'packed_literals' "
               "WHERE release_id = %s", (release_id,))
    before = slices()
    assert all(literals is None and separators is None for _, _, literals, separators in before)
    for _, classes, _, _ in before:
        assert sorted(classes) == ["q0", "q1", "s0"]
        assert len(classes["q0"]) == len(classes["q1"]) == len(classes["s0"])

    # the same classes in either form (in another release order: drawn at each run)
    def as_sets(rows, unpack):
        return sorted(tuple(c) for row in rows for c in zip(*unpack(row)))

    def unpacked(row):
        _, _, literals, separators = row
        out = []
        for n, text in enumerate(literals[:2]):
            separator, null = separators[2 * n:2 * n + 2]
            out.append([None if f == null else f for f in bytes(text).decode().split(separator)[1:]])
        return out

    assert as_sets(before, lambda row: [row[1]["q0"], row[1]["q1"]]) == as_sets(packed, unpacked)


ODD = r"""
CREATE TABLE odd AS
SELECT i % 10 AS age,
       (ARRAY['plain', 'with "quotes"', 'comma, here', '{braces}', E'back\\slash', '', NULL, 'ünïcødé',
              E'unit\x1fseparator', E'record\x1eseparator', 'NULL'])[1 + i % 11] AS word,
       CASE WHEN i % 2 = 0 THEN 'pg_class'::regclass ELSE 'pg_type'::regclass END AS code,
       (ARRAY['flu', E'x\x1fy', ''])[1 + i % 3] AS note
FROM generate_series(1, 220) i
"""


@pytest.mark.parametrize("layout, sensitive, joined", [
    ("compact", "code", True), ("flat", "code", True), ("compact", "note", False), ("flat", "note", False)])
def test_value_sets_holding_separators_quotes_and_null_are_released_whole(db, schema, layout,
                                                                           sensitive, joined):
    """Every layout, joined back (a regclass is) or written from the values read: each released
    value set is a set of source values, together every value, and each row's own (the build's
    check refuses a row outside its class's set)."""
    db.execute(ODD)
    rel = create_release(db, "mondrian_view", schema, "odd", k=4, quasi_identifiers=["age", "word"],
                         sensitive=[sensitive], layout=layout)
    assert db.execute("SELECT (parameters->>'joined_back')::bool, verified, row_count FROM anon.releases "
                      "WHERE format('%%I.%%I', release_schema, release_name) = %s",
                      (rel,)).fetchone() == (joined, True, 220)
    released = {v for (v,) in db.execute(f"SELECT DISTINCT unnest(word) FROM {rel}")}
    source = {v for (v,) in db.execute("SELECT DISTINCT word FROM odd")}
    assert released == source and len(source) == 11
    if sensitive == "note":
        notes = sorted(v for (v,) in db.execute(f"SELECT note FROM {rel}"))
        assert notes == sorted(v for (v,) in db.execute("SELECT note FROM odd"))
