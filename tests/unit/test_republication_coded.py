"""The stable mode keeps each row's QIs, identifiers and sensitive value as codes into their
distinct texts (db.republication.Coded): everything computed from them (person hashes, record
fingerprints, the factorization the check ranks, the candidates as bitmasks) is what the texts
themselves give."""
import hashlib
import json

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.methods.mondrian import published_arrays
from plpy_anon.db.republication import (
    Coded,
    Integers,
    _bitmasks,
    _cohorts,
    _decoded_texts,
    _unique_inverse,
    coded_person_hashes,
    factorized,
    person_hashes,
    record_fingerprints,
)

# texts as PostgreSQL holds them: never a zero character
TEXT = st.one_of(st.none(), st.sampled_from(["a", "b", "", "é", "10", "9"]),
                st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                        max_size=4))
SALT = "00112233445566778899aabbccddeeff"


def coded(texts: list, shuffled: bool = False, extra: tuple = ()) -> Coded:
    """``texts`` coded as the reader codes them (NULL -1), the dictionary in another order and
    holding texts no row has when asked."""
    dictionary = list(dict.fromkeys([t for t in texts if t is not None]))
    if shuffled:
        dictionary = dictionary[::-1]
    dictionary += [t for t in extra if t is not None and t not in dictionary]
    position = {t: i for i, t in enumerate(dictionary)}
    return Coded(np.array([-1 if t is None else position[t] for t in texts], dtype=np.int32),
                 dictionary)


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, max_size=30), st.booleans(), st.lists(TEXT, max_size=3))
def test_a_coded_column_is_its_texts(texts, shuffled, extra):
    column = coded(texts, shuffled, tuple(extra))
    assert np.asarray(column, dtype=object).tolist() == texts
    assert column.tolist() == texts
    assert len(column) == len(texts)
    assert (None in column) == (None in texts)
    codes, uniques = factorized(column)
    _, expected_uniques = pd.factorize(np.asarray(texts, dtype=object))
    # the same partition of the rows, over the texts some row has
    assert sorted(uniques) == sorted(expected_uniques.tolist())
    assert [None if c < 0 else uniques[c] for c in codes.tolist()] == texts


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, max_size=20), st.lists(TEXT, max_size=20), st.booleans())
def test_coded_columns_join_as_their_texts(first, second, same_dictionary):
    a = coded(first + second if same_dictionary else first)
    b = Coded(coded(first + second).codes[len(first):], a.dictionary) if same_dictionary \
        else coded(second, shuffled=True)
    if same_dictionary:
        a = a.take(np.arange(len(first)))
    assert (a + b).tolist() == first + second
    assert (a + []).tolist() == first


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(TEXT, TEXT, TEXT), max_size=25), st.booleans())
def test_fingerprints_of_coded_records_are_those_of_their_texts(rows, shuffled):
    qis = [[r[0] for r in rows], [r[1] for r in rows]]
    sensitive = [r[2] for r in rows]
    expected = record_fingerprints(qis, sensitive)
    got = record_fingerprints([coded(q, shuffled) for q in qis], coded(sensitive, shuffled))
    assert got.tolist() == expected.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=6), unique=True, max_size=20), st.booleans(), st.data())
def test_hashes_of_a_coded_identifier_are_those_of_its_texts(ids, shuffled, data):
    ids = data.draw(st.permutations(ids))
    assert coded_person_hashes([coded(ids, shuffled)], SALT) == person_hashes([ids], SALT)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=20), st.booleans())
def test_hashes_of_an_integer_identifier_are_those_of_its_digits(ids, composite):
    # an integer column's text, as PostgreSQL prints it: its decimal digits
    texts = [str(v) for v in ids]
    column = Integers(np.array(ids, dtype=np.int64))
    if composite:
        assert coded_person_hashes([column, coded(texts)], SALT) == person_hashes([texts, texts], SALT)
    else:
        assert coded_person_hashes([column], SALT) == person_hashes([texts], SALT)
    assert Coded.of(column).tolist() == texts
    assert column.shared() == len(ids) - len(set(ids))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 130), max_size=6), min_size=1, max_size=12))
def test_bitmasks_and_cohorts_hold_each_owners_values(values):
    owners = np.array([o for o, vs in enumerate(values) for _ in vs], dtype=np.int64)
    codes = np.array([v for vs in values for v in vs], dtype=np.int64)
    words = 3
    masks = _bitmasks(owners, codes, len(values), words)
    bits = np.unpackbits(masks.astype("<u8").view(np.uint8), axis=1, bitorder="little")
    assert [set(np.flatnonzero(row).tolist()) for row in bits] == [set(vs) for vs in values]
    dictionary = np.array([f"v{i:03d}" for i in range(64 * words)], dtype=object)
    cohort, texts = _cohorts(len(values), [("s", masks, dictionary)])
    # people of the same values share a cohort, whose text lists those values
    for owner, vs in enumerate(values):
        assert json.loads(texts[cohort[owner]]) == {"s": sorted(f"v{v:03d}" for v in set(vs))}
    assert len(texts) == len({frozenset(vs) for vs in values})


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, max_size=30))
def test_stored_values_packed_as_sql_packs_them_read_back_as_their_texts(texts):
    # what VERSIONS_PACKED's string_agg writes: each text in UTF-8 (NULL 0xFF), zero-separated
    packed = b"\x00".join(b"\xff" if t is None else t.encode() for t in texts)
    codes, distinct = _decoded_texts(packed if texts else None, len(texts))
    assert [None if c == len(distinct) else distinct[c] for c in codes.tolist()] == texts
    # the distinct texts in the order they first appear
    assert distinct == list(dict.fromkeys(t for t in texts if t is not None))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), max_size=30))
def test_an_integer_column_is_coded_as_postgresql_prints_it(values):
    # what the reader hands on: NULL as 0 with a mask
    numbers = np.array([0 if v is None else v for v in values], dtype=np.int64)
    mask = np.array([v is None for v in values], dtype=bool)
    column = Coded.of_integers(numbers, mask)
    assert column.tolist() == [None if v is None else str(v) for v in values]
    assert Coded.of_integers(numbers, None).tolist() == [str(v) for v in numbers.tolist()]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1) | st.integers(0, 5), max_size=40))
def test_unique_inverse_is_numpys(keys):
    keys = np.array(keys, dtype=np.int64)
    distinct, inverse = _unique_inverse(keys)
    expected, expected_inverse = np.unique(keys, return_inverse=True)
    assert distinct.tolist() == expected.tolist()
    assert inverse.tolist() == expected_inverse.ravel().tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 300)), max_size=60),
       st.integers(0, 2**31 - 400))
def test_unique_inverse_of_entry_keys_is_numpys(entries, base):
    # (version, group) pairs as entries are keyed: a narrow range of each, anywhere in an int4
    keys = np.array([(base + v) << 32 | (base + g) for v, g in entries], dtype=np.int64)
    distinct, inverse = _unique_inverse(keys)
    expected, expected_inverse = np.unique(keys, return_inverse=True)
    assert distinct.tolist() == expected.tolist()
    assert inverse.tolist() == expected_inverse.ravel().tolist()


KEY_TEXT = st.text(st.sampled_from("ab\x1f\"[],\\"), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(KEY_TEXT, KEY_TEXT, KEY_TEXT), min_size=2, max_size=12, unique=True))
def test_distinct_composite_keys_hash_to_distinct_people(keys):
    hashes = person_hashes([list(column) for column in zip(*keys)], SALT)
    assert len(set(hashes)) == len(keys)
    plain = [k for k in keys if not any("\x1f" in t for t in k)]   # hashed as stored states were
    if plain:
        assert person_hashes([list(c) for c in zip(*plain)], SALT) == [
            hashlib.sha256(bytes.fromhex(SALT) + "\x1f".join(k).encode()).digest() for k in plain]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=12),
       st.lists(st.integers(0, 11), max_size=15))
def test_published_arrays_repeat_each_value_as_often_as_its_group_publishes_it(counts, labels):
    counts = np.array(counts, dtype=np.int64)
    labels = np.array([label % counts.shape[0] for label in labels], dtype=np.int64)
    elements = np.array(["a", '"b c"', "d", "NULL"], dtype=object)
    want = ["{" + ",".join(e for e, n in zip(elements.tolist(), counts[label].tolist())
                           for _ in range(n)) + "}" for label in labels.tolist()]
    assert published_arrays(counts, elements, labels) == want
