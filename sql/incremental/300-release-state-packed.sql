-- A stable release's people as one row per release (docs/republication.md, "What it remembers"):
-- a refresh reads and writes the state of every person it publishes, and one row of sorted
-- hashes and aligned arrays costs a fraction of a row per person (no per-row index entries,
-- constraint checks or tuples). The people's candidates are stored once per distinct set
-- (people of one class mostly share theirs). anon.release_people stays, as the view of the
-- same state one row per person.
CREATE TABLE anon.release_state (
    release_id     integer   PRIMARY KEY,
    persons        bytea     NOT NULL,  -- each person's SHA-256 (32 bytes), in ascending order
    member_groups  integer[] NOT NULL,  -- each person's group, in the order of persons
    versions       integer[] NOT NULL,  -- versions that held each person
    cohorts        integer[] NOT NULL,  -- each person's candidates: a position (from 0) in candidate_sets
    candidate_sets jsonb     NOT NULL,  -- [{sensitive column: [values]}, ...]
    CONSTRAINT persons_aligned CHECK (
        pg_catalog.octet_length(persons) = 32 * pg_catalog.cardinality(member_groups)
        AND pg_catalog.cardinality(versions) = pg_catalog.cardinality(member_groups)
        AND pg_catalog.cardinality(cohorts) = pg_catalog.cardinality(member_groups)),
    -- a set of candidates is {sensitive column: [value text, ...]}: anything else written by a
    -- custodian into its own row is refused when written, not met by a refresh later
    CONSTRAINT candidates_well_formed CHECK (
        pg_catalog.jsonb_typeof(candidate_sets) = 'array'
        AND NOT pg_catalog.jsonb_path_exists(candidate_sets, 'strict $[*] ? (@.type() != "object")', '{}', true)
        AND NOT pg_catalog.jsonb_path_exists(candidate_sets, 'strict $[*].* ? (@.type() != "array")', '{}', true)
        AND NOT pg_catalog.jsonb_path_exists(candidate_sets, 'strict $[*].*[*] ? (@.type() != "string")', '{}', true))
);
COMMENT ON TABLE anon.release_state IS
    'Releases refreshed in the stable mode: their people (salted hashes of their identifiers, sorted), each one''s class, versions and candidate sensitive values, one row per release.';
-- hashes do not compress: kept uncompressed, so that a person's slice is read without the rest
ALTER TABLE anon.release_state ALTER COLUMN persons SET STORAGE EXTERNAL;
SELECT pg_catalog.pg_extension_config_dump('anon.release_state', '');

-- the state written so far, one row per release (people of equal candidates share a set)
INSERT INTO anon.release_state (release_id, persons, member_groups, versions, cohorts, candidate_sets)
WITH sets AS (
    SELECT s.release_id, s.candidates, (pg_catalog.row_number() OVER (
               PARTITION BY s.release_id ORDER BY s.candidates::pg_catalog.text) - 1)::integer AS cohort
    FROM (SELECT DISTINCT p.release_id, p.candidates FROM anon.release_people p) s)
SELECT p.release_id,
       pg_catalog.string_agg(p.person, ''::bytea ORDER BY p.person),
       pg_catalog.array_agg(p.member_group ORDER BY p.person),
       pg_catalog.array_agg(p.versions ORDER BY p.person),
       pg_catalog.array_agg(s.cohort ORDER BY p.person),
       (SELECT pg_catalog.jsonb_agg(x.candidates ORDER BY x.cohort) FROM sets x WHERE x.release_id = p.release_id)
FROM anon.release_people p JOIN sets s ON s.release_id = p.release_id AND s.candidates = p.candidates
GROUP BY p.release_id;

-- out of the extension first, so that it leaves the configuration tables pg_dump reads
ALTER EXTENSION plpy_anon DROP TABLE anon.release_people;
DROP TABLE anon.release_people;

-- one row per person, read under the row security of anon.release_state (security_invoker)
CREATE VIEW anon.release_people WITH (security_invoker = true) AS
SELECT s.release_id,
       pg_catalog.substr(s.persons, (32 * (u.o - 1) + 1)::integer, 32) AS person,
       u.member_group, s.candidate_sets -> u.cohort AS candidates, u.versions
FROM anon.release_state s
     CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(s.member_groups), pg_catalog.unnest(s.cohorts),
                                   pg_catalog.unnest(s.versions))
         WITH ORDINALITY AS u(member_group, cohort, versions, o);
COMMENT ON VIEW anon.release_people IS
    'Releases refreshed in the stable mode, one row per person (a salted hash of their identifiers): their class, the sensitive values every published version left them as candidates, the versions that held them (anon.release_state, under its row security).';

ALTER TABLE anon.release_state ENABLE ROW LEVEL SECURITY;
CREATE POLICY release_owner ON anon.release_state
    USING (EXISTS (SELECT 1 FROM anon.releases r WHERE r.release_id = release_state.release_id
                   AND pg_catalog.pg_has_role(r.release_owner, 'MEMBER')));
