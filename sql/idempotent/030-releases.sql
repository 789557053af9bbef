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

-- The event trigger fires for every REFRESH MATERIALIZED VIEW in the database, by any role, of
-- any view. SECURITY DEFINER (the extension's owner; search_path pinned, everything qualified):
-- the caller needs no privilege on schema anon, and a view that is not a release costs one
-- indexed lookup and nothing else. Event trigger functions cannot be called directly.
-- A release is recognised by more than its name: the view must be in the very schema the
-- release was created in (same OID: not a schema of that name re-created by someone else after
-- a DROP SCHEMA) and owned by the role that created the release. Anything else carrying a
-- release's name is not a release, and the extension owner never reads it (the verification
-- would run that role's views with the extension owner's rights).
CREATE OR REPLACE FUNCTION anon._on_refresh()
RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cmd record;
    message text; detail text; hint text; state text;
BEGIN
    FOR cmd IN SELECT e.objid FROM pg_catalog.pg_event_trigger_ddl_commands() e
               WHERE e.command_tag = 'REFRESH MATERIALIZED VIEW'
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                   JOIN anon.releases r ON r.release_schema = n.nspname AND r.release_name = c.relname
                                        AND r.schema_oid = n.oid AND r.release_owner = c.relowner
                   WHERE c.oid = cmd.objid AND c.relkind = 'm') THEN
            BEGIN
                PERFORM anon._record_refresh(cmd.objid);
            EXCEPTION WHEN OTHERS THEN
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
