"""A stable release's state and versions (anon.release_state, anon.release_versions), written
whole at every refresh, compress with lz4 where the server has it (pglz took most of the
statement writing a state): every compressible column of both, and a stable release's rows stored
so read back through anon.release_people."""
from __future__ import annotations

import pytest

from tests.helpers import create_release


def test_the_state_and_versions_compress_with_lz4(db):
    if not db.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                      "WHERE name = 'default_toast_compression'").fetchone()[0]:
        pytest.skip("this server is built without lz4")
    columns = db.execute("""
        SELECT a.attrelid::regclass::text, a.attname::text, a.attcompression::text
        FROM pg_attribute a
        WHERE a.attrelid IN ('anon.release_state'::regclass, 'anon.release_versions'::regclass)
          AND a.attnum > 0 AND NOT a.attisdropped AND a.attstorage IN ('x', 'm')""").fetchall()
    assert columns and all(compression == "l" for _, _, compression in columns), columns


def test_a_stable_state_stored_compressed_reads_back_whole(db, schema):
    db.execute("CREATE TABLE pz (id int PRIMARY KEY, age int, dx text)")
    db.execute("INSERT INTO pz SELECT i, i % 23, 'dx' || i % 5 FROM generate_series(1, 3000) i")
    release = create_release(db, "mondrian_view", schema, "pz", k=5, l=2, quasi_identifiers=["age"],
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    db.execute("DELETE FROM pz WHERE id % 40 = 0")
    db.execute("SELECT anon.refresh(%s)", (release,))
    people, compressed = db.execute("""
        SELECT (SELECT count(*) FROM anon.release_people p WHERE p.release_id = s.release_id),
               pg_column_compression(s.member_groups)
        FROM anon.release_state s JOIN anon.releases r USING (release_id)
        WHERE r.release_schema || '.' || r.release_name = %s""", (release,)).fetchone()
    assert people == 3000
    assert compressed in ("lz4", None)     # None: stored inline, too small to compress
