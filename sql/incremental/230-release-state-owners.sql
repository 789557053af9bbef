-- A stable release's state is its owner's alone. anon.release_people holds a salted hash of each
-- person's identifiers with the candidates every version left them; with the salt, a custodian
-- who can guess another custodian's identifiers (national ids, say) could test who is in that
-- custodian's table and what it left them. So the salt leaves the catalog every custodian reads
-- (anon.releases.parameters) for anon.release_secrets, and both tables are read and written under
-- row security: a role sees the rows of the releases it owns (or whose owner it is a member of);
-- superusers and the extension's owner bypass it. plpy_anon's own reads and writes of the state
-- run with row_security = on (release_rows.owner_state), so a restore (pg_restore sets it off)
-- still refreshes a custodian's release, which reads its state as the custodian.
CREATE TABLE anon.release_secrets (
    release_id  integer PRIMARY KEY,
    person_salt text    NOT NULL
);
COMMENT ON TABLE anon.release_secrets IS
    'Stable releases: the salt of their person hashes (anon.release_people), readable by the release''s owner only (row security).';
SELECT pg_catalog.pg_extension_config_dump('anon.release_secrets', '');

INSERT INTO anon.release_secrets (release_id, person_salt)
SELECT release_id, parameters ->> 'person_salt' FROM anon.releases WHERE parameters ? 'person_salt';
UPDATE anon.releases SET parameters = parameters - 'person_salt' WHERE parameters ? 'person_salt';

ALTER TABLE anon.release_people ENABLE ROW LEVEL SECURITY;
ALTER TABLE anon.release_secrets ENABLE ROW LEVEL SECURITY;
CREATE POLICY release_owner ON anon.release_people
    USING (EXISTS (SELECT 1 FROM anon.releases r WHERE r.release_id = release_people.release_id
                   AND pg_catalog.pg_has_role(r.release_owner, 'MEMBER')));
CREATE POLICY release_owner ON anon.release_secrets
    USING (EXISTS (SELECT 1 FROM anon.releases r WHERE r.release_id = release_secrets.release_id
                   AND pg_catalog.pg_has_role(r.release_owner, 'MEMBER')));

-- The candidates of a person: {sensitive column: [value text, ...]}. Anything else (written by a
-- custodian into its own rows) is refused when written, not met by a refresh later.
ALTER TABLE anon.release_people ADD CONSTRAINT candidates_well_formed CHECK (
    pg_catalog.jsonb_typeof(candidates) = 'object'
    AND NOT pg_catalog.jsonb_path_exists(candidates, 'strict $.* ? (@.type() != "array")', '{}', true)
    AND NOT pg_catalog.jsonb_path_exists(candidates, 'strict $.*[*] ? (@.type() != "string")', '{}', true));
