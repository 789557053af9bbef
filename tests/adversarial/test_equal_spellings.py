"""Adversarial (review of stop 25): l counted spellings, not values.

Break-Merge read sensitive values as text, so values EQUAL in their column's type were different
values to it: numeric 1.0 and 1.00, float8 0 and -0, interval '1 day' and '24 hours', 'HIV' and
'hiv' under a case-insensitive (nondeterministic) collation; and json documents differing in
white space (json has no equality; the Mondrian family counted them by their text too). A
second review found the same with jsonb, numeric[] and numrange ('1.0' and '1.00' inside), a
third with a domain over a domain, an array of a domain and a composite type. Every group of its sensitive tables
held one value written two ways, and the release was published with l = 2, verified: the check
counted the tables' text too.

Now the build gives equal values one text (``reader.merge_equal_spellings``: PostgreSQL groups
them with the type's equality and the column's collation) and the check compares the tables'
values as the source column's type (``break_merge.compared_values``). Each release is checked
here from its rows, reading the values back in the column's type.
"""
from __future__ import annotations

import pytest

# column -> how an analyst who knows its type compares the released text
TYPES = {"dose": "value::numeric", "z": "value::float8", "iv": "value::interval",
         "dx": "value COLLATE ci", "doc": "value::jsonb", "jb": "value::jsonb",
         "arr": "value::numeric[]", "rng": "value::numrange", "dd": "value::dose2",
         "da": "value::dose[]", "comp": "value::pair"}


@pytest.fixture
def spelled(db, schema):
    db.execute("CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
    db.execute("CREATE DOMAIN dose AS numeric; CREATE DOMAIN dose2 AS dose; "
               "CREATE TYPE pair AS (amount numeric, unit text)")
    db.execute("CREATE TABLE t (rid int, age int, zip text, dose numeric, z float8, iv interval, "
               "dx text COLLATE ci, doc json, jb jsonb, arr numeric[], rng numrange, dd dose2, "
               "da dose[], comp pair)")
    # two values per column, each written two ways; ages 0-9 hold the first, 10-19 the second
    db.execute("""INSERT INTO t SELECT g, g % 20, 'z' || (g % 3),
        CASE WHEN g % 20 < 10 THEN (ARRAY[1.0, 1.00])[1 + g % 2] ELSE (ARRAY[2.0, 2.000])[1 + g % 2] END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['0', '-0']::float8[])[1 + g % 2] ELSE 5 END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['1 day', '24 hours']::interval[])[1 + g % 2] ELSE '1 mon' END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['HIV', 'hiv'])[1 + g % 2] ELSE (ARRAY['flu', 'FLU'])[1 + g % 2] END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['{"dx":"HIV"}', '{"dx": "HIV"}'])[1 + g % 2]::json
             ELSE (ARRAY['{"dx":"flu"}', '{ "dx" : "flu" }'])[1 + g % 2]::json END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['1.0', '1.00'])[1 + g % 2]::jsonb ELSE '2'::jsonb END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['{1.0}', '{1.00}'])[1 + g % 2]::numeric[] ELSE '{2}' END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['[1.0,2)', '[1.00,2)'])[1 + g % 2]::numrange ELSE '[3,4)' END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['1.0', '1.00'])[1 + g % 2]::dose2 ELSE 2 END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['{1.0}', '{1.00}'])[1 + g % 2]::dose[] ELSE '{2}' END,
        CASE WHEN g % 20 < 10 THEN (ARRAY['(1.0,mg)', '(1.00,mg)'])[1 + g % 2]::pair ELSE '(2,mg)' END
        FROM generate_series(1, 400) g""")
    assert db.execute("SELECT count(DISTINCT dose), count(DISTINCT z), count(DISTINCT iv), "
                      "count(DISTINCT dx), count(DISTINCT doc::jsonb), count(DISTINCT jb), "
                      "count(DISTINCT arr), count(DISTINCT rng), count(DISTINCT dd), "
                      "count(DISTINCT da), count(DISTINCT comp) FROM t").fetchone() == (2,) * 11
    return schema


@pytest.mark.parametrize("column", list(TYPES))
def test_break_merge_l_counts_values_not_spellings(db, spelled, release_schema, column):
    release = db.execute(
        "SELECT anon.break_merge('t', k => 4, l => 2, quasi_identifiers => '{age,zip}', "
        "sensitive => %s, identifiers => '{rid}', release_schema => %s)",
        ([column], release_schema)).fetchone()[0]
    st = release.replace('"', "") + f"_st_{column}"
    groups, single, rows = db.execute(
        f"SELECT count(*), count(*) FILTER (WHERE d < 2), sum(n) FROM (SELECT gid, "
        f"count(DISTINCT {TYPES[column]}) AS d, sum(count) AS n FROM {st} GROUP BY gid) g").fetchone()
    assert groups > 0 and single == 0 and rows == 400
    # equal values are published under one text: no group lists a value twice
    assert db.execute(f"SELECT count(*) FROM (SELECT gid, {TYPES[column]} FROM {st} "
                      "GROUP BY 1, 2 HAVING count(*) > 1) x").fetchone()[0] == 0


@pytest.mark.parametrize("column", list(TYPES))
def test_mondrian_l_counts_values_not_spellings(db, spelled, release_schema, column):
    # it was refused by the check (the partitioner counted spellings); now it is built l-diverse
    release = db.execute(
        "SELECT anon.mondrian_view('t', k => 4, l => 2, quasi_identifiers => '{age,zip}', "
        "sensitive => %s, identifiers => '{rid}', release_schema => %s)",
        ([column], release_schema)).fetchone()[0]
    compared = TYPES[column].replace("value", column)
    single = db.execute(f"SELECT count(*) FILTER (WHERE d < 2), count(*) FROM (SELECT count(DISTINCT "
                        f"{compared}) AS d FROM {release} GROUP BY age, zip) c").fetchone()
    assert single[0] == 0 and single[1] > 0

