-- What each published version of a stable release showed per group (docs/republication.md): the
-- multiset of sensitive values of each of its classes, so that a refresh can check every pair
-- of versions against the difference attack (core.republish). One row per version; a group is
-- the class a person keeps from version to version (groups only merge: each version's group ids
-- are kept with the group holding them now). Values only, never a person.
CREATE TABLE anon.release_versions (
    release_id integer   NOT NULL,
    version    integer   NOT NULL,     -- 0: the release's creation
    group_ids  integer[] NOT NULL,     -- the version's groups
    roots      integer[] NOT NULL,     -- the group holding each of them now (updated at each refresh)
    sizes      integer[] NOT NULL,     -- each group's number of published rows
    vals       text[]    NOT NULL,     -- the groups' values, concatenated in group order (NULL: no value)
    held_back  integer   NOT NULL,     -- rows of the source not published yet
    counterfeit integer  NOT NULL,     -- published rows kept for people who left
    PRIMARY KEY (release_id, version)
);
COMMENT ON TABLE anon.release_versions IS
    'Releases refreshed in the stable mode: per published version, the multiset of sensitive values of each group (the difference check compares every pair of versions).';
SELECT pg_catalog.pg_extension_config_dump('anon.release_versions', '');
