-- plpy_anon's schemas are members of the extension: this script creates "anon" (and, later,
-- "anon_py") itself, so pg_dump leaves them to CREATE EXTENSION, DROP EXTENSION removes them,
-- and the control file names pg_catalog as the extension's schema (as plpgsql's does) only
-- because PostgreSQL wants one. An existing schema "anon" belongs to someone else (PostgreSQL
-- Anonymizer also uses the name): refuse it with what to do, before anything is created.
DO $guard$
DECLARE
    nsp record;
    contents text;
BEGIN
    SELECT n.oid, pg_catalog.pg_get_userbyid(n.nspowner) AS owner
    INTO nsp FROM pg_catalog.pg_namespace n WHERE n.nspname = 'anon';
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT pg_catalog.string_agg(d.what, ', ' ORDER BY d.what) INTO contents
    FROM (SELECT o.type || ' ' || o.identity AS what
          FROM pg_catalog.pg_depend dep,
               LATERAL pg_catalog.pg_identify_object(dep.classid, dep.objid, dep.objsubid) o
          WHERE dep.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
            AND dep.refobjid = nsp.oid
          LIMIT 6) d;
    RAISE EXCEPTION 'plpy_anon needs its own schema "anon", but a schema "anon" (owner %) already exists',
                    nsp.owner
        USING ERRCODE = '42P06',
              DETAIL = CASE WHEN contents IS NULL
                            THEN 'The schema is empty, but plpy_anon creates its schema itself (it is part of the extension).'
                            ELSE 'It already holds: ' || contents || '.' END,
              HINT = 'Nothing was installed. Rename the existing schema (ALTER SCHEMA anon RENAME TO anon_old), '
                     'or drop it or the extension that uses it (PostgreSQL Anonymizer: DROP EXTENSION anon), '
                     'then run CREATE EXTENSION plpy_anon again.';
END
$guard$;

CREATE SCHEMA anon;
COMMENT ON SCHEMA anon IS 'plpy_anon: anonymized releases (functions analysts never call, the release catalog).';
