"""Issue 14: the source is read in chunks into compact arrays, never one Python object per value
kept (plpy_anon/db/reader.py). Checked inside the backend, on the arrays the methods receive."""
from __future__ import annotations

import psycopg
import pytest

CHECK = r"""
DO $do$
import numpy as np
from plpy_anon.db import columns, guards, reader
tbl = guards.table(plpy, 'src')
cols = {c.name: c for c in columns.table_columns(plpy, tbl)}
d = reader.read_columns(plpy, tbl, [cols['age'], cols['born'], cols['perf']],
                        [cols['zip'], cols['sex']])
truth = plpy.execute("SELECT count(*) AS n, count(DISTINCT zip) AS zips, "
                     "array_agg(age ORDER BY id) AS ages, array_agg(zip ORDER BY id) AS zip_values, "
                     "array_agg(ctid::text ORDER BY id) AS ctids, array_agg(id) AS unused "
                     "FROM ONLY src")[0]
assert d.n_rows == truth["n"], (d.n_rows, truth["n"])
zips = d.columns['zip'].values
# the categorical values point to one string per distinct value, not one object per row
assert len({id(v) for v in zips}) <= truth["zips"] + 1, len({id(v) for v in zips})
assert d.columns['age'].values.dtype == np.int64 and d.columns['perf'].values.dtype == np.float64
# same rows, same order as the ctids handed back: compare value by value through the ctids
by_ctid = {r["c"]: (r["age"], r["zip"]) for r in plpy.execute("SELECT ctid::text AS c, age, zip FROM src")}
ctids = [c.strip('"') for c in d.row_ctids[1:-1].split('","')]
ages, mask = d.columns['age'].values, d.columns['age'].null_mask
for i, c in enumerate(ctids):
    age, z = by_ctid[c]
    assert (age is None) == bool(mask[i]), (c, age)
    assert age is None or ages[i] == age, (c, age, ages[i])
    assert zips[i] == z, (c, z, zips[i])
$do$ LANGUAGE plpython3u
"""


@pytest.mark.parametrize("chunk_blocks", ["1", "7", None])
def test_read_columns_is_chunked_compact_and_in_handback_order(db, schema, chunk_blocks):
    db.execute("CREATE TABLE src (id int, age int, sex text, zip text, born date, perf float8)")
    db.execute("""INSERT INTO src SELECT i, CASE WHEN i % 50 = 0 THEN NULL ELSE 18 + (i * 37) % 70 END,
                         CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
                         CASE WHEN i % 41 = 0 THEN NULL ELSE (53700 + (i * 13) % 40)::text END,
                         DATE '1950-01-01' + (i * 97) % 20000, 40 + ((i * 53) % 600) / 10.0
                  FROM generate_series(1, 5000) i""")
    db.execute("DELETE FROM src WHERE id % 7 = 0")          # holes in the blocks
    run_check(db, CHECK, "plpy_anon.read_chunk_blocks", chunk_blocks)


def run_check(db, check: str, setting: str, value: str | None) -> None:
    """Run ``check`` (a DO block of assertions in the backend) with ``setting`` at ``value``
    (unless None), the failing assertion's message as the test's; the setting reset after."""
    if value:
        db.execute(f"SET {setting} = '{value}'")
    try:
        db.execute(check)
    except psycopg.Error as e:                                # the assertion's message, readable
        pytest.fail(str(e))
    finally:
        db.execute(f"RESET {setting}")


EXACT_CHECK = r"""
DO $do$
import math
from plpy_anon.db import columns, guards, reader
tbl = guards.table(plpy, 'odd')
cols = {c.name: c for c in columns.table_columns(plpy, tbl)}
numeric = ['s2', 'i4', 'i8', 'f8', 'nu', 'd', 'ts', 'tz']
d = reader.read_columns(plpy, tbl, [cols[c] for c in numeric], [cols['t'], cols['b']],
                        texts=[cols['i4']], exact=True)
truth = {r["c"]: r for r in plpy.execute(
    "SELECT ctid::text AS c, s2, i4, i8, f8::text AS f8, nu::text AS nu, "
    "CASE WHEN isfinite(d) THEN d - DATE '2000-01-01' END AS d, d::text AS dt, "
    " extract(epoch FROM ts)::float8 AS ts, "
    "extract(epoch FROM tz)::float8 AS tz, t, b::text AS b, i4::text AS i4t FROM odd")}
assert d.n_rows == len(truth)
ctids = [c.strip('"') for c in d.row_ctids[1:-1].split('","')]
for i, c in enumerate(ctids):
    row = truth[c]
    for name in numeric:
        col = d.columns[name]
        null = row['dt' if name == 'd' else name] is None
        assert bool(col.null_mask[i]) == null, (name, c, row[name])
        if null or name in ('d', 'nu', 'f8'):
            continue
        assert col.values[i] == row[name], (name, c, row[name], col.values[i])
    if row['d'] is None and row['dt'] is not None:                       # +-infinity
        assert d.columns['d'].values[i] == (math.inf if row['dt'] == 'infinity' else -math.inf)
    elif row['d'] is not None:
        assert d.columns['d'].values[i] == row['d']
    if row['f8'] is not None:
        assert repr(float(d.columns['f8'].values[i])) == repr(float(row['f8'])), (c, row['f8'])
    for name, data in (('t', d.columns['t']), ('b', d.columns['b']), ('i4t', d.texts['i4']),
                       ('nu', d.numeric_texts['nu'])):
        code = int(data.codes[i])
        assert (code == -1) == (row[name] is None), (name, c, row[name], code)
        assert code == -1 or data.dictionary[code] == row[name], (name, c, row[name])
        assert len(data.dictionary) == len(set(data.dictionary)), name
$do$ LANGUAGE plpython3u
"""


@pytest.mark.parametrize("client_encoding", ["UTF8", "LATIN1"])
def test_read_columns_reads_nulls_extremes_and_any_text_exactly(db, schema, client_encoding):
    """NULL in every numeric type beside the values nearest to its stand-in (int min, infinities,
    NaN), and texts with separators, escapes, the empty string and characters beyond the client's
    encoding: each read as SQL reads it, row by row through the ctids."""
    db.execute("""CREATE TABLE odd (s2 int2, i4 int4, i8 int8, f8 float8, nu numeric, d date,
                                    ts timestamp, tz timestamptz, t text, b bool)""")
    db.execute(r"""INSERT INTO odd VALUES
        (-32768, -2147483648, -9223372036854775808, 'NaN', 'NaN', '-infinity', '-infinity',
         '-infinity', '', true),
        (32767, 2147483647, 9223372036854775807, 'Infinity', 12345678901234567890.5, 'infinity',
         'infinity', 'infinity', E'two\nlines\ttab', false),
        (0, 0, 0, '-Infinity', '-Infinity', '2000-01-01', '2026-11-29 01:02:03.456789',
         '1969-12-31 23:59:59.999999+00', E'back\\slash "quoted" {braced,}', NULL),
        (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
        (1, 1, 1, 0.1, 1.10, '1970-01-01', '1900-02-28 00:00:00.000001', '2038-01-19 03:14:08+00',
         'ünïcödé 𝄞 中文', true),
        (1, 1, 1, 0.1, 1.1, '1970-01-01', NULL, NULL, 'NULL', true)""")
    db.execute("INSERT INTO odd SELECT * FROM odd")              # every value twice: one code
    run_check(db, EXACT_CHECK, "client_encoding", client_encoding)


SEPARATOR_CHECK = r"""
DO $do$
from plpy_anon.db import columns, guards, reader
tbl = guards.table(plpy, 'marks')
cols = {c.name: c for c in columns.table_columns(plpy, tbl)}
d = reader.read_columns(plpy, tbl, [cols['n']], [cols['a'], cols['b'], cols['c']], exact=True)
truth = {r["ctid"]: r for r in plpy.execute(
    "SELECT ctid::text AS ctid, a, b, c, n::text AS n FROM marks")}
ctids = [c.strip('"') for c in d.row_ctids[1:-1].split('","')]
assert d.n_rows == len(truth) == len(ctids)
for name, data in (('a', d.columns['a']), ('b', d.columns['b']), ('c', d.columns['c']),
                   ('n', d.numeric_texts['n'])):
    assert len(data.dictionary) == len(set(data.dictionary)), name
    for i, c in enumerate(ctids):
        code = int(data.codes[i])
        want = truth[c][name]
        assert (code == -1) == (want is None), (name, c, want, code)
        assert code == -1 or data.dictionary[code] == want, (name, c, want, data.dictionary[code])
$do$ LANGUAGE plpython3u
"""


@pytest.mark.parametrize("chunk_blocks", ["1", None])
def test_texts_holding_the_separator_or_the_null_stand_in_are_read_exactly(db, schema,
                                                                           chunk_blocks):
    """Text is read joined by the byte 0x01 with NULL as the text 0x02: a value holding 0x01,
    a value that is 0x02 beside NULLs or without them, in some chunks and not in others, is
    still read as SQL reads it, NULL apart from it."""
    db.execute("CREATE TABLE marks (id int, a text, b text, c text, n numeric)")
    db.execute(r"""INSERT INTO marks SELECT i,
        CASE WHEN i = 400 THEN E'x\x01y' WHEN i % 97 = 0 THEN NULL ELSE 'a' || i % 5 END,
        CASE WHEN i = 700 THEN E'\x02' WHEN i = 701 THEN NULL WHEN i % 89 = 0 THEN NULL
             ELSE 'b' || i % 3 END,
        CASE WHEN i = 900 THEN E'\x02' WHEN i = 901 THEN E'\x01' WHEN i = 902 THEN ''
             ELSE 'c' END,
        CASE WHEN i % 83 = 0 THEN NULL ELSE i % 7 + 0.5 END
        FROM generate_series(1, 1000) i""")
    run_check(db, SEPARATOR_CHECK, "plpy_anon.read_chunk_blocks", chunk_blocks)
