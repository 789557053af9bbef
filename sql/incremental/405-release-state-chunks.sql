-- A stable release's people in several rows (docs/republication.md, "What it remembers"): one
-- row of every person's hash and aligned arrays grows ~60 bytes a person (6 GB at 100M people,
-- past PostgreSQL's 1 GB a value), and a refresh held it whole in one read and one write. Each
-- row (chunk 0, 1, ...) holds a run of the people in ascending order of their hashes, at most
-- plpy_anon.build_memory / 64 of them (a person ~60 bytes), with its own candidate sets and
-- entries: every row is a whole state of its people, checked and viewed as before.
ALTER TABLE anon.release_state
    ADD COLUMN chunk integer NOT NULL DEFAULT 0,  -- the row's place: its people's hashes follow those of the rows before
    ADD CONSTRAINT chunk_not_negative CHECK (chunk >= 0),
    -- how many rows the state was written in (every row says it): a row lost or copied is seen
    ADD COLUMN chunks integer NOT NULL DEFAULT 1,
    ADD CONSTRAINT chunk_within_chunks CHECK (chunk < chunks),
    DROP CONSTRAINT release_state_pkey,
    ADD PRIMARY KEY (release_id, chunk);
COMMENT ON TABLE anon.release_state IS
    'Releases refreshed in the stable mode: their people (salted hashes of their identifiers, sorted), each one''s class, versions and candidate sensitive values, in rows of a bounded number of people per release (chunk 0, 1, ...).';
