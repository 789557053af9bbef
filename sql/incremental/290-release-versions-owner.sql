-- What each version of a stable release published per group (anon.release_versions) holds its
-- sensitive values, leavers' retired ones included: like the release's people, it is its owner's
-- alone (row security, as anon.release_people: 230-release-state-owners.sql).
ALTER TABLE anon.release_versions ENABLE ROW LEVEL SECURITY;
CREATE POLICY release_owner ON anon.release_versions
    USING (EXISTS (SELECT 1 FROM anon.releases r WHERE r.release_id = release_versions.release_id
                   AND pg_catalog.pg_has_role(r.release_owner, 'MEMBER')));
