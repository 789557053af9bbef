"""A stable release's packed state (db.republication.State): people found by their 32-byte hashes
by sorting and searching, exactly as a dictionary of the hashes finds them, zero bytes and shared
leading bytes included."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.republication import State, packed

# hashes ending in zero bytes (which numpy's byte-string items drop) and hashes sharing their
# first 8 bytes (the key they are sorted by) drawn often
HASH = st.one_of(st.binary(min_size=32, max_size=32),
                 st.binary(min_size=0, max_size=31).map(lambda b: b + bytes(32 - len(b))),
                 st.binary(min_size=24, max_size=24).map(lambda b: b"\x01" * 8 + b))


@settings(max_examples=200, deadline=None)
@given(st.lists(HASH, unique=True, max_size=30), st.lists(HASH, max_size=10), st.data())
def test_people_are_found_by_their_hashes_as_a_dictionary_finds_them(stored, others, data):
    # the people asked for: some of the stored ones (in any order, repeated) and others
    asked = (data.draw(st.lists(st.sampled_from(stored), max_size=30)) if stored else []) + others
    asked = data.draw(st.permutations(asked))
    state = State(packed(stored), np.arange(len(stored)), np.ones(len(stored), dtype=np.int64),
                  np.zeros(len(stored), dtype=np.int64), [{}])
    position = {h: i for i, h in enumerate(stored)}
    assert state.find(packed(asked)).tolist() == [position.get(h, -1) for h in asked]
    assert state.hashes() == stored
