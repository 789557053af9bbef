-- People who leave a stable release's table and come back (docs/republication.md, "What it
-- remembers"): an analyst who knows it is the same person intersects their candidates across the
-- absence and links the classes that held them before it to those that hold them after. So a
-- person is never erased from the state, only marked absent: each person's last version in the
-- table (published or held back), and, for people who came back, each earlier stay (its entry and
-- its last version), so that the groups of every stored version are followed only while they were
-- in the table.
ALTER TABLE anon.release_state
    ADD COLUMN last_versions integer[],  -- each person's last version in the table (aligned with persons); NULL: stored before, everyone present
    ADD COLUMN stay_owners   integer[],  -- the earlier stays of people who came back: the person's position (from 0) in the row
    ADD COLUMN stay_entries  integer[],  -- the stay's entry: a position in entry_versions/entry_groups
    ADD COLUMN stay_last     integer[],  -- and its last version in the table
    ADD CONSTRAINT absent_well_formed CHECK (
        (last_versions IS NULL OR (
            pg_catalog.cardinality(last_versions) = pg_catalog.cardinality(member_groups)
            AND COALESCE(pg_catalog.array_ndims(last_versions), 1) = 1
            AND pg_catalog.array_position(last_versions, NULL) IS NULL
            AND 0 <= ALL (last_versions)))
        AND (stay_owners IS NULL) = (stay_entries IS NULL)
        AND (stay_owners IS NULL) = (stay_last IS NULL)
        AND (stay_owners IS NULL OR (
            pg_catalog.cardinality(stay_owners) = pg_catalog.cardinality(stay_entries)
            AND pg_catalog.cardinality(stay_owners) = pg_catalog.cardinality(stay_last)
            AND COALESCE(pg_catalog.array_ndims(stay_owners), 1) = 1
            AND COALESCE(pg_catalog.array_ndims(stay_entries), 1) = 1
            AND COALESCE(pg_catalog.array_ndims(stay_last), 1) = 1
            AND pg_catalog.array_position(stay_owners, NULL) IS NULL
            AND pg_catalog.array_position(stay_entries, NULL) IS NULL
            AND pg_catalog.array_position(stay_last, NULL) IS NULL
            AND 0 <= ALL (stay_owners) AND 0 <= ALL (stay_entries) AND 0 <= ALL (stay_last))));
CREATE OR REPLACE VIEW anon.release_people WITH (security_invoker = true) AS
SELECT s.release_id,
       pg_catalog.substr(s.persons, (32 * (u.o - 1) + 1)::integer, 32) AS person,
       u.member_group, s.candidate_sets -> u.cohort AS candidates, u.versions, u.last_version
FROM anon.release_state s
     CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(s.member_groups), pg_catalog.unnest(s.cohorts),
                                   pg_catalog.unnest(s.versions), pg_catalog.unnest(s.last_versions))
         WITH ORDINALITY AS u(member_group, cohort, versions, last_version, o);
COMMENT ON VIEW anon.release_people IS
    'Releases refreshed in the stable mode, one row per person ever in the table (a salted hash of their identifiers): their class, the sensitive values every published version left them as candidates, the versions that published them, their last version in the table (older than the state''s for people gone since; NULL: stored before), under anon.release_state''s row security.';
