"""Adversarial: the separator of a slice's packed class literals. The joined literals
(generalization.pack_literals given a list) choose it among the characters the slice's own
literals do not hold; the compiled writer (class_sets.ClassSets) among those its column's whole
table of elements does not hold. A column whose values, all slices together, hold every
character a server encoding other than UTF-8 may be separated by (ASCII 1-127) while each slice
leaves some free, is then refused (54000) by the compiled writer where the joined literals of
the very same slice pack. Out of core in a LATIN1 database, a region's element table also holds
the placeholders of the table's values the region does not hold, whose digits may be the only
free characters: a release built in memory is then refused out of core."""
from __future__ import annotations

import numpy as np
import pytest

from plpy_anon.core import mondrian_jit
from plpy_anon.db import class_sets, stored_classes
from plpy_anon.db.generalization import pack_literals
from tests.helpers import class_sizes, distinct_sensitive_per_class, encoded_database


def _two_classes_splitting_ascii():
    """Elements of ASCII 1-127 (each once), class 0 the first half, class 1 the rest."""
    entries = [chr(c) for c in range(1, 128)]
    elements = stored_classes.array_elements(entries)
    codes = np.arange(len(entries), dtype=np.int64)
    order = np.arange(len(entries), dtype=np.int64)
    bounds = np.array([0, 63, len(entries)], dtype=np.int64)
    return elements, codes, order, bounds


def test_compiled_literals_of_a_slice_pack_wherever_the_joined_literals_do():
    kernels = mondrian_jit.kernels()
    if kernels is None:
        pytest.skip("numba cannot be imported")
    elements, codes, order, bounds = _two_classes_splitting_ascii()
    table = class_sets.EntryTable(elements, kernels.write_class_sets)
    for first, last in [(0, 1), (1, 2)]:          # each class its own slice
        joined = stored_classes.array_literals(codes, elements, order, bounds, first, last)
        packed, marks = pack_literals(joined, any_character=False)   # the joined ones pack
        assert packed.decode().split(marks[0])[1:] == joined
        assert all(marks[0] not in literal for literal in joined)
        written = stored_classes.array_literals(codes, table, order, bounds, first, last)
        packed_written, marks_written = pack_literals(written, any_character=False)
        assert packed_written.decode().split(marks_written[0])[1:] == joined


# In a database: out of core, every region's categorical QI is coded in the whole table's order,
# the values a region does not hold as placeholder labels (core.regions.PHANTOM and their
# position's digits), which the compiled writer's element table holds too.

#: every ASCII character but '7' and '8': the only two a LATIN1 database's literals may be
#: separated by, which no value of the column holds
ALL_BUT_TWO = "".join(chr(c) for c in range(1, 128) if chr(c) not in "78")
#: 100 other values, of digits 0-6 only
OTHERS = ["r" + np.base_repr(i, 7) for i in range(100)]


@pytest.fixture(scope="module")
def latin1(connect):
    with encoded_database(connect, "LATIN1") as name, connect(dbname=name) as conn:
        conn.execute("SET client_encoding = 'UTF8'")
        yield conn


@pytest.mark.parametrize("memory", [
    "1GB",
    "64kB",
])
def test_a_column_leaving_two_ascii_characters_free_is_released_in_a_latin1_database(
        latin1, memory):
    table = f"two_free_{memory.lower()}"
    latin1.execute(f"CREATE TABLE {table} (id int, n int, w text, s text)")
    latin1.execute(f"""INSERT INTO {table}
        SELECT i, i %% 50, CASE WHEN i <= 3000 THEN %s ELSE (%s::text[])[1 + i %% 100] END,
               's' || i %% 3 FROM generate_series(1, 6000) i""", (ALL_BUT_TWO, OTHERS))
    latin1.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
    try:
        latin1.execute("CREATE SCHEMA IF NOT EXISTS rel")
        rel = latin1.execute(
            f"SELECT anon.mondrian_view('{table}', 5, l => 2, quasi_identifiers => "
            "ARRAY['n', 'w'], sensitive => ARRAY['id', 's'], release_schema => 'rel')").fetchone()[0]
    finally:
        latin1.execute("RESET plpy_anon.build_memory")
    regions = latin1.execute("SELECT metrics->'out_of_core'->>'regions' FROM anon.releases "
                             "WHERE format('%%I.%%I', release_schema, release_name) = %s",
                             (rel,)).fetchone()[0]
    assert (regions is None) == (memory == "1GB")
    outside = latin1.execute(f"""
        SELECT count(*) FROM {rel} r RIGHT JOIN {table} t USING (id)
        WHERE r.id IS NULL OR NOT (r.n @> t.n AND t.w = ANY (r.w) AND r.s = t.s)""").fetchone()[0]
    assert outside == 0
    assert min(class_sizes(latin1, rel, ["n", "w"])) >= 5
    assert min(distinct_sensitive_per_class(latin1, rel, ["n", "w"], "s")) >= 2
