-- Trust- and purpose-aware releases: requesters, their trust, purposes and the
-- release whose degree of anonymisation follows trust and whose levels follow the purpose.

-- A requester's history goes with it (what ON DELETE CASCADE did before the foreign keys were
-- dropped for parallel restores: sql/incremental/220-requester-history.sql); a rename carries it.
CREATE OR REPLACE FUNCTION anon._requester_history()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    gone text[];
    came text[];
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM anon.interactions;
        DELETE FROM anon.recommendations;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM anon.interactions i USING changed_old o WHERE i.requester_name = o.requester_name;
        DELETE FROM anon.recommendations r USING changed_old o WHERE r.requester_name = o.requester_name;
    ELSE
        SELECT pg_catalog.array_agg(requester_name) INTO gone FROM changed_old o
        WHERE NOT EXISTS (SELECT 1 FROM changed_new n WHERE n.requester_name = o.requester_name);
        SELECT pg_catalog.array_agg(requester_name) INTO came FROM changed_new n
        WHERE NOT EXISTS (SELECT 1 FROM changed_old o WHERE o.requester_name = n.requester_name);
        IF gone IS NULL THEN
            RETURN NULL;
        END IF;
        -- requester_name is the key: renamed rows can be paired only one at a time
        IF pg_catalog.cardinality(gone) <> 1 OR pg_catalog.cardinality(came) <> 1 THEN
            RAISE EXCEPTION 'rename requesters one at a time'
                USING ERRCODE = '0A000',
                      DETAIL = 'Each requester''s interactions and recommendations follow its new name.',
                      HINT = 'Run one UPDATE anon.requesters SET requester_name = ... WHERE requester_name = ... per requester.';
        END IF;
        UPDATE anon.interactions SET requester_name = came[1] WHERE requester_name = gone[1];
        UPDATE anon.recommendations SET requester_name = came[1] WHERE requester_name = gone[1];
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION anon._requester_history() IS
    'Internal: deletes (also on TRUNCATE) or renames a requester''s interactions and recommendations with it (statement triggers on anon.requesters).';

DROP TRIGGER IF EXISTS requester_history_delete ON anon.requesters;
DROP TRIGGER IF EXISTS requester_history_rename ON anon.requesters;
DROP TRIGGER IF EXISTS requester_history_truncate ON anon.requesters;
CREATE TRIGGER requester_history_truncate AFTER TRUNCATE ON anon.requesters
    FOR EACH STATEMENT EXECUTE FUNCTION anon._requester_history();
CREATE TRIGGER requester_history_delete AFTER DELETE ON anon.requesters
    REFERENCING OLD TABLE AS changed_old FOR EACH STATEMENT EXECUTE FUNCTION anon._requester_history();
CREATE TRIGGER requester_history_rename AFTER UPDATE ON anon.requesters
    REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed_new FOR EACH STATEMENT
    EXECUTE FUNCTION anon._requester_history();
