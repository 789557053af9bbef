-- 0.2.0: refreshes in the stable mode (docs/republication.md). What such a release has
-- published about each person, so that the next version keeps it: the person's group (class)
-- and the candidate values every version so far left them (the intersection an analyst keeping
-- every version computes). A person is the hash of the release's salt (its parameters) and their
-- identifier columns' text, never the identifier itself; people who left are kept, so that one
-- who comes back is held to what earlier versions showed.
CREATE TABLE anon.release_people (
    release_id   integer NOT NULL,
    person       bytea   NOT NULL,
    member_group integer NOT NULL,
    candidates   jsonb   NOT NULL,     -- {sensitive column: [values]}
    versions     integer NOT NULL,     -- versions that held the person
    PRIMARY KEY (release_id, person)
);
COMMENT ON TABLE anon.release_people IS
    'Releases refreshed in the stable mode: per person (a salted hash of their identifiers), their class and the sensitive values every published version left them as candidates.';
SELECT pg_catalog.pg_extension_config_dump('anon.release_people', '');

-- the cross-version check of each refresh (people checked, fewest candidates left, ...)
ALTER TABLE anon.refresh_history ADD COLUMN across_versions jsonb;
