-- The release machinery every method plugs into: find, refresh, drop, and the bookkeeping that
-- keeps anon.releases true whether a release is refreshed through anon.refresh() or by a plain
-- REFRESH MATERIALIZED VIEW.

-- Called by the event trigger below after REFRESH MATERIALIZED VIEW of a release: moves what the
-- partitioning run measured (stashed in this backend's GD) into the catalog row.
CREATE OR REPLACE FUNCTION anon._record_refresh(relation oid)
RETURNS void
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import releases
releases.record_refresh(plpy, GD, relation)
$$;

-- The check of a release that belongs to another role (publish.checked_as_owner): called by the
-- query of a throwaway materialized view owned by that role, whose REFRESH PostgreSQL runs as the
-- owner in a security-restricted operation; it runs the check the calling session left pending.
#WRAP anon._check_as_owner(check_id integer) RETURNS boolean VOLATILE
CREATE OR REPLACE FUNCTION anon._check_as_owner_py(check_id integer)
RETURNS boolean
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import publish
return publish.run_pending_check(plpy, check_id)
$$;
COMMENT ON FUNCTION anon._check_as_owner_py(integer) IS
    'Internal: runs, as a release''s owner, the check of its released rows that this session left pending.';

-- The event trigger fires for every REFRESH MATERIALIZED VIEW in the database, by any role, of
-- any view, and runs with the refresher's rights (no SECURITY DEFINER: no code of plpy_anon runs
-- with more rights than its caller). A view whose query calls none of the extension's functions
-- is not a release: it costs one catalog lookup and needs no privilege on schema anon. A release
-- is recorded with the refresher's rights, which refreshing it needs anyway (its query calls
-- functions in anon), so a refresher without them is told what to grant. A release is
-- recognised by more than its name: the view must be in the very schema the release was created
-- in and owned by the role that created the release.
CREATE OR REPLACE FUNCTION anon._on_refresh()
RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cmd record;
    message text; detail text; hint text; state text;
BEGIN
    FOR cmd IN SELECT e.objid FROM pg_catalog.pg_event_trigger_ddl_commands() e
               WHERE e.command_tag = 'REFRESH MATERIALIZED VIEW'
    LOOP
        CONTINUE WHEN NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_rewrite w
            JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                                       AND d.objid = w.oid
                                       AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
            JOIN pg_catalog.pg_depend m ON m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                                       AND m.objid = d.refobjid AND m.deptype = 'e'
                                       AND m.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
            JOIN pg_catalog.pg_extension x ON x.oid = m.refobjid AND x.extname = 'plpy_anon'
            WHERE w.ev_class = cmd.objid);
        IF NOT pg_catalog.has_schema_privilege('anon', 'USAGE')
           OR NOT pg_catalog.has_table_privilege('anon.releases', 'SELECT, UPDATE') THEN
            RAISE EXCEPTION 'refreshing % needs the privileges of a plpy_anon custodian',
                            cmd.objid::pg_catalog.regclass
                USING ERRCODE = '42501',
                      DETAIL = 'A release''s refresh is checked from its rows and recorded in anon.releases, with the rights of the role that refreshes it.',
                      HINT = pg_catalog.format('GRANT plpy_anon_custodian TO %I;', current_user);
        END IF;
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                   JOIN anon.releases r ON r.release_schema = n.nspname
                                        AND coalesce(r.parameters ->> 'storage', r.release_name) = c.relname
                                        AND r.schema_oid = n.oid AND r.release_owner = c.relowner
                   WHERE c.oid = cmd.objid AND c.relkind = 'm') THEN
            BEGIN
                PERFORM anon._record_refresh(cmd.objid);
            EXCEPTION WHEN OTHERS OR query_canceled THEN
                -- a release that fails its verification aborts the REFRESH: re-raise with the
                -- message alone (no "plpy.Error: " prefix), same SQLSTATE, DETAIL and HINT
                GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL,
                                        hint = PG_EXCEPTION_HINT, state = RETURNED_SQLSTATE;
                message := pg_catalog.regexp_replace(message, '^((plpy|spiexceptions)\.[A-Za-z]+: )+', '');
                IF detail <> '' AND hint <> '' THEN
                    RAISE EXCEPTION USING MESSAGE = message, ERRCODE = state, DETAIL = detail, HINT = hint;
                ELSIF detail <> '' THEN
                    RAISE EXCEPTION USING MESSAGE = message, ERRCODE = state, DETAIL = detail;
                ELSIF hint <> '' THEN
                    RAISE EXCEPTION USING MESSAGE = message, ERRCODE = state, HINT = hint;
                ELSE
                    RAISE EXCEPTION USING MESSAGE = message, ERRCODE = state;
                END IF;
            END;
        END IF;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION anon._on_refresh() FROM PUBLIC;

DROP EVENT TRIGGER IF EXISTS plpy_anon_record_refresh;
CREATE EVENT TRIGGER plpy_anon_record_refresh ON ddl_command_end
    WHEN TAG IN ('REFRESH MATERIALIZED VIEW')
    EXECUTE FUNCTION anon._on_refresh();
