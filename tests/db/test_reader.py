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
    if chunk_blocks:
        db.execute("SET plpy_anon.read_chunk_blocks = " + chunk_blocks)
    try:
        db.execute(CHECK)
    except psycopg.Error as e:                                # the assertion's message, readable
        pytest.fail(str(e))
    finally:
        db.execute("RESET plpy_anon.read_chunk_blocks")
