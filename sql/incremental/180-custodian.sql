-- Custodians who are not superusers: the role plpy_anon_custodian holds what creating,
-- refreshing and dropping releases of one's own tables needs (USAGE on anon, EXECUTE on its
-- functions, the catalog's rows; 900-privileges.sql grants them), the way PostgreSQL's predefined
-- roles do: GRANT plpy_anon_custodian TO alice. Roles belong to the cluster, so a second
-- database's install finds it; one that can log in was not made here and is refused.
DO $custodian$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'plpy_anon_custodian') THEN
        CREATE ROLE plpy_anon_custodian NOLOGIN;
        COMMENT ON ROLE plpy_anon_custodian IS
            'plpy_anon: members create, refresh and drop releases of tables they may read (GRANT plpy_anon_custodian TO role).';
    ELSIF EXISTS (SELECT 1 FROM pg_catalog.pg_roles
                  WHERE rolname = 'plpy_anon_custodian' AND (rolcanlogin OR rolsuper)) THEN
        RAISE EXCEPTION 'role plpy_anon_custodian exists and can log in or is a superuser'
            USING ERRCODE = '42710',
                  DETAIL = 'plpy_anon grants its custodians'' privileges to this role; the one it creates is NOLOGIN.',
                  HINT = 'Rename or drop that role (ALTER ROLE plpy_anon_custodian RENAME TO ...), then CREATE EXTENSION plpy_anon again.';
    END IF;
END
$custodian$;
