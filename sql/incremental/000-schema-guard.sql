-- plpy_anon lives in its own schema "anon" (the control file's schema = anon). When the schema is
-- missing, CREATE EXTENSION creates it in this very transaction; when it already exists,
-- PostgreSQL silently installs into it -- next to another extension's objects (PostgreSQL
-- Anonymizer also uses "anon") or a schema someone made for something else. Refuse that.
-- Incremental files run on install only, so an upgrade never sees this block.
--
-- "Created by this transaction": the schema's row was written by the current transaction or one
-- of its subtransactions (CREATE EXTENSION inside a SAVEPOINT writes it with a subtransaction's
-- xid, which is larger than the top-level one). Such an xid is "in progress" to
-- pg_xact_status; a visible row of any other transaction is committed. And the schema must be
-- empty: only this extension itself may depend on it (BEGIN; CREATE SCHEMA anon; CREATE
-- FUNCTION anon.f ...; CREATE EXTENSION plpy_anon would otherwise pass the first test).
DO $guard$
DECLARE
    nsp record;
    top bigint := pg_catalog.pg_current_xact_id()::text::bigint;
    delta bigint;
    ours boolean := false;
    contents text;
BEGIN
    SELECT n.oid, n.xmin::text::bigint AS xmin, pg_catalog.pg_get_userbyid(n.nspowner) AS owner
    INTO nsp FROM pg_catalog.pg_namespace n WHERE n.nspname = 'anon';
    IF NOT FOUND THEN
        RETURN;      -- CREATE EXTENSION ... SCHEMA elsewhere is refused by relocatable = false
    END IF;
    delta := (nsp.xmin - top % 4294967296 + 4294967296) % 4294967296;
    IF delta < 2147483648 THEN
        ours := pg_catalog.pg_xact_status((top + delta)::text::pg_catalog.xid8) = 'in progress';
    END IF;
    SELECT pg_catalog.string_agg(d.what, ', ' ORDER BY d.what) INTO contents
    FROM (SELECT o.type || ' ' || o.identity AS what
          FROM pg_catalog.pg_depend dep,
               LATERAL pg_catalog.pg_identify_object(dep.classid, dep.objid, dep.objsubid) o
          WHERE dep.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
            AND dep.refobjid = nsp.oid
            AND NOT (dep.classid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                     AND dep.objid = (SELECT e.oid FROM pg_catalog.pg_extension e
                                      WHERE e.extname = 'plpy_anon'))
          LIMIT 6) d;
    IF ours AND contents IS NULL THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'plpy_anon needs its own schema "anon", but a schema "anon" (owner %) already exists',
                    nsp.owner
        USING ERRCODE = '42P06',
              DETAIL = CASE WHEN contents IS NULL
                            THEN 'The schema was not created by this CREATE EXTENSION; it is empty.'
                            ELSE 'It already holds: ' || contents || '.' END,
              HINT = 'Nothing was installed. Rename the existing schema (ALTER SCHEMA anon RENAME TO anon_old), '
                     'or drop it or the extension that uses it (PostgreSQL Anonymizer: DROP EXTENSION anon), '
                     'then run CREATE EXTENSION plpy_anon again.';
END
$guard$;
