-- What a role that is not a superuser (a custodian) may change in the catalog: the rows of its
-- own releases (naming a source it may read), declarations of tables it owns (column roles,
-- hierarchies, learned priorities), its own release schemas and snapshots, and the refresh
-- history of its own releases. Analysts, requesters, purposes and the workload are the DBA's
-- (custodians only read them: 900-privileges.sql): otherwise one custodian could weaken another
-- role's release (k, grantees) or declare a DBA table's identifying columns sensitive. A trigger
-- rather than row security: pg_dump
-- and pg_restore run with row_security = off, under which a restore's REFRESH of a custodian's
-- release (its query reads anon.releases as that custodian) fails.
CREATE OR REPLACE FUNCTION anon._is_next_release_id(release_id integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN $1 = pg_catalog.currval('anon.releases_release_id_seq');
EXCEPTION WHEN object_not_in_prerequisite_state THEN     -- no id drawn in this session
    RETURN false;
END
$$;
COMMENT ON FUNCTION anon._is_next_release_id(integer) IS
    'Internal: whether an id is the one anon.releases'' sequence last gave this session (the catalog guard''s rule for new rows).';

-- A stable release's salt (the key of its person hashes) is its owner's alone. Custodians may
-- not select anon.release_secrets' salts: row security would hide the rows but not their values
-- from the planner, and a role can test a hidden value with a leakproof function under EXPLAIN
-- ANALYZE (whether the policy's subplan ran). They read a salt through the view below and write
-- one under row security (no SECURITY DEFINER): the test is on current_user, the role the code
-- runs as. session_user would not do: ANALYZE, CREATE INDEX and REFRESH run a table's or
-- materialized view's owner's code as that owner inside a superuser's session, whose
-- session_user is a member of every owner (tests/adversarial/test_stable_salt_in_restricted_operations.py).
CREATE OR REPLACE VIEW anon.readable_release_secrets WITH (security_barrier) AS
    SELECT shown.release_id, shown.person_salt
    FROM (SELECT s.release_id, s.person_salt
          FROM anon.release_secrets s
          WHERE EXISTS (SELECT 1 FROM anon.releases r WHERE r.release_id = s.release_id
                        AND pg_catalog.pg_has_role(r.release_owner, 'MEMBER'))
          OFFSET 0) shown;
COMMENT ON VIEW anon.readable_release_secrets IS
    'Internal: the salts of the stable releases whose owner the querying role is a member of.';

CREATE OR REPLACE FUNCTION anon._require_state_owner(release_id integer, gone_ok boolean, verb text)
RETURNS void
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    owner regrole;
BEGIN
    SELECT r.release_owner INTO owner FROM anon.releases r WHERE r.release_id = $1;
    IF (owner IS NULL AND NOT $2)
       OR (owner IS NOT NULL AND NOT pg_catalog.pg_has_role(current_user, owner, 'MEMBER')) THEN
        RAISE EXCEPTION 'permission denied for the state of release %', $1
            USING ERRCODE = '42501',
                  HINT = pg_catalog.format('A stable release''s state is %s by its owner only.', $3);
    END IF;
END
$$;
COMMENT ON FUNCTION anon._require_state_owner(integer, boolean, text) IS
    'Internal: refuses (42501) a role (current_user) that is not a member of a release''s owner (gone_ok: a release whose catalog row is gone passes).';

CREATE OR REPLACE FUNCTION anon._release_salt(release_id integer)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM anon._require_state_owner($1, false, 'read');
    RETURN (SELECT s.person_salt FROM anon.readable_release_secrets s WHERE s.release_id = $1);
END
$$;
COMMENT ON FUNCTION anon._release_salt(integer) IS
    'Internal: a stable release''s salt, for a member of its owner; NULL when it has none.';

CREATE OR REPLACE FUNCTION anon._store_release_salt(release_id integer, salt text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
-- row security on: a session that turned it off (pg_restore does) writes its own rows all the same
SET search_path = pg_catalog, pg_temp
SET row_security = on
AS $$
BEGIN
    -- a salt whose release is gone (a concurrent drop committed first) may go: it keys nothing
    PERFORM anon._require_state_owner($1, $2 IS NULL, 'written');
    IF $2 IS NULL THEN
        DELETE FROM anon.release_secrets s WHERE s.release_id = $1;
    ELSE
        -- no ON CONFLICT: its DO UPDATE would read the hidden salt column
        UPDATE anon.release_secrets s SET person_salt = $2 WHERE s.release_id = $1;
        IF NOT FOUND THEN
            INSERT INTO anon.release_secrets (release_id, person_salt) VALUES ($1, $2);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION anon._store_release_salt(integer, text) IS
    'Internal: stores (NULL: deletes) a stable release''s salt, for a member of its owner (row security).';

-- A hierarchy's leaves are the distinct values of its column (the builders read them from the
-- table): custodians may read only anon.hierarchies' keys (source, column_name), for the reason
-- above (row security hides rows, not values). A build or refresh reads a hierarchy's paths
-- through this view (its owner's rights read the table), which shows the rows of the live columns
-- the role running the query may SELECT: functions in a view's quals run as current_user, so
-- inside a SECURITY DEFINER function it is the function's owner that is checked. The join on
-- pg_attribute keeps out rows of a dropped column or table (has_column_privilege raises on a
-- column name that does not exist). A table under row security shows its hierarchies only to a
-- role its policies do not apply to (they hide rows, and a hierarchy holds every row's value).
-- OFFSET 0 is a fence: the querying role's conditions, even leakproof ones (text comparisons on
-- leaf, which the planner would push into the index scan below security_barrier's quals, where
-- EXPLAIN ANALYZE counts the rows they match), are evaluated only on the rows shown.
CREATE OR REPLACE VIEW anon.readable_hierarchies WITH (security_barrier) AS
    SELECT shown.source, shown.column_name, shown.leaf, shown.path
    FROM (SELECT h.source, h.column_name, h.leaf, h.path
          FROM anon.hierarchies h
          JOIN pg_catalog.pg_attribute a ON a.attrelid = h.source AND a.attname = h.column_name
                                        AND a.attnum > 0 AND NOT a.attisdropped
          JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
          WHERE pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'SELECT')
            AND (NOT c.relrowsecurity
                 OR (NOT c.relforcerowsecurity AND pg_catalog.pg_has_role(c.relowner, 'USAGE'))
                 OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
                            AND (r.rolsuper OR r.rolbypassrls)))
          OFFSET 0) shown;
COMMENT ON VIEW anon.readable_hierarchies IS
    'Internal: the rows of anon.hierarchies whose column exists and may be read by the querying role.';

-- A hierarchy's leaves must not outlive its column: a table owner dropping or renaming a column
-- (or dropping the table) to erase its values would otherwise keep them in the catalog, in every
-- dump, and readable through a new column of the same name. SECURITY DEFINER, because the owner
-- of a table the DBA declared a hierarchy on may have no right on the catalog; it deletes only
-- the rows of what the firing command dropped or altered, and a function returning
-- event_trigger can be run by no one but the event trigger system.
CREATE OR REPLACE FUNCTION anon._forget_dropped_hierarchies()
RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_EVENT = 'sql_drop' THEN
        -- a dropped column is named by the last of its address_names (its attname is already gone)
        DELETE FROM anon.hierarchies h
        USING pg_catalog.pg_event_trigger_dropped_objects() d
        WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND h.source::oid = d.objid
          AND (d.objsubid = 0 OR h.column_name = d.address_names[pg_catalog.cardinality(d.address_names)]);
    ELSE
        -- a renamed column's hierarchy holds the values of the column it was: it is neither
        -- carried to the new name (registered by its owner again) nor left for a later column
        -- of the old name; a rename reaches the altered table's children and partitions too
        WITH RECURSIVE altered(oid) AS (
            SELECT c.objid FROM pg_catalog.pg_event_trigger_ddl_commands() c
            WHERE c.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
            UNION
            SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN altered p ON i.inhparent = p.oid)
        DELETE FROM anon.hierarchies h
        USING altered
        WHERE h.source::oid = altered.oid
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                          WHERE a.attrelid = altered.oid AND a.attname = h.column_name
                            AND a.attnum > 0 AND NOT a.attisdropped);
    END IF;
END
$$;
COMMENT ON FUNCTION anon._forget_dropped_hierarchies() IS
    'Internal: deletes the hierarchies of dropped tables and columns and of renamed columns '
    '(sql_drop and ALTER TABLE event triggers).';
REVOKE ALL ON FUNCTION anon._forget_dropped_hierarchies() FROM PUBLIC;

DROP EVENT TRIGGER IF EXISTS plpy_anon_forget_dropped_hierarchies;
CREATE EVENT TRIGGER plpy_anon_forget_dropped_hierarchies ON sql_drop
    EXECUTE FUNCTION anon._forget_dropped_hierarchies();
DROP EVENT TRIGGER IF EXISTS plpy_anon_forget_renamed_hierarchies;
CREATE EVENT TRIGGER plpy_anon_forget_renamed_hierarchies ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION anon._forget_dropped_hierarchies();

CREATE OR REPLACE FUNCTION anon._catalog_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    allowed boolean;
    what text;
BEGIN
    IF (SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.rolname = current_user) THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    -- a SQL_ASCII database stores a text's bytes unchecked and PL/Python reads none that is not
    -- UTF-8: one such row would make every function reading the catalog fail for every release
    IF TG_OP <> 'DELETE' AND pg_catalog.current_setting('server_encoding') = 'SQL_ASCII' THEN
        BEGIN
            PERFORM pg_catalog.convert_to(NEW::text, 'UTF8');
        EXCEPTION WHEN character_not_in_repertoire THEN
            RAISE EXCEPTION 'a row of anon.% holds bytes that are not UTF-8, which PL/Python cannot read in this SQL_ASCII database', TG_TABLE_NAME
                USING ERRCODE = '22021',
                      DETAIL = SQLERRM,
                      HINT = 'Write its texts as UTF-8 (a LATIN1 text: pg_catalog.convert_from(pg_catalog.convert(pg_catalog.convert_to(text, ''SQL_ASCII''), ''LATIN1'', ''UTF8''), ''SQL_ASCII'')).';
        END;
    END IF;
    -- the row as it was (update, delete) and as it will be (insert, update)
    FOR r IN SELECT * FROM (VALUES (OLD, false), (NEW, true)) AS v(x, new)
             WHERE CASE WHEN v.new THEN TG_OP <> 'DELETE' ELSE TG_OP <> 'INSERT' END LOOP
        CASE TG_TABLE_NAME
        WHEN 'releases' THEN
            allowed := pg_catalog.pg_has_role((r.x).release_owner, 'MEMBER')
                       -- a new row takes the id the sequence gave this session: a role that
                       -- chose it (OVERRIDING SYSTEM VALUE) could take over an old release's state
                       AND (TG_OP <> 'INSERT' OR anon._is_next_release_id((r.x).release_id))
                       AND (NOT r.new OR pg_catalog.has_table_privilege((r.x).source, 'SELECT'))
                       -- what a release is stays as created: plpy_anon never updates these, and
                       -- an owner listing its own view among the objects would have it read as one
                       AND (TG_OP <> 'UPDATE' OR NOT r.new
                            OR (OLD.release_id, OLD.release_schema, OLD.release_name, OLD.source, OLD.method,
                                OLD.parameters, OLD.schema_oid, OLD.release_owner, OLD.created_at)
                               IS NOT DISTINCT FROM
                               (NEW.release_id, NEW.release_schema, NEW.release_name, NEW.source, NEW.method,
                                NEW.parameters, NEW.schema_oid, NEW.release_owner, NEW.created_at));
            what := pg_catalog.format('release %I.%I', (r.x).release_schema, (r.x).release_name);
        WHEN 'refresh_history' THEN
            -- a history row is read by its name once the release is dropped: the name is its own
            allowed := EXISTS (SELECT 1 FROM anon.releases x WHERE x.release_id = (r.x).release_id
                               AND pg_catalog.pg_has_role(x.release_owner, 'MEMBER')
                               AND (NOT r.new OR (r.x).release_name = x.release_schema || '.' || x.release_name));
            what := pg_catalog.format('the %s rows of release %s', TG_TABLE_NAME, (r.x).release_id);
        WHEN 'release_versions', 'release_regions' THEN
            allowed := EXISTS (SELECT 1 FROM anon.releases x WHERE x.release_id = (r.x).release_id
                               AND pg_catalog.pg_has_role(x.release_owner, 'MEMBER'));
            what := pg_catalog.format('the %s rows of release %s', TG_TABLE_NAME, (r.x).release_id);
        WHEN 'release_schemas' THEN
            allowed := pg_catalog.pg_has_role((SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                               WHERE n.oid = (r.x).schema_oid), 'MEMBER');
            what := pg_catalog.format('release schema %I', (r.x).schema_name);
        WHEN 'snapshots' THEN
            allowed := pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                               WHERE c.oid = (r.x).relation), 'MEMBER');
            what := pg_catalog.format('snapshot %I.%I', (r.x).snapshot_schema, (r.x).snapshot_name);
        WHEN 'hierarchies' THEN
            allowed := pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                               WHERE c.oid = (r.x).source), 'MEMBER')
                       -- the rows of a dropped column or table (their owner is gone with it) go
                       -- with it: anon._forget_dropped_hierarchies, run by whoever dropped it
                       OR (TG_OP = 'DELETE' AND NOT EXISTS (
                               SELECT 1 FROM pg_catalog.pg_attribute a
                               WHERE a.attrelid = (r.x).source AND a.attname = (r.x).column_name
                                 AND a.attnum > 0 AND NOT a.attisdropped));
            what := pg_catalog.format('declarations of table %s', (r.x).source);
        ELSE          -- column_roles, priorities, workload_profiles: keyed by source
            allowed := pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                               WHERE c.oid = (r.x).source), 'MEMBER');
            what := pg_catalog.format('declarations of table %s', (r.x).source);
        END CASE;
        IF NOT coalesce(allowed, false) THEN
            RAISE EXCEPTION 'permission denied to change % in anon.%', what, TG_TABLE_NAME
                USING ERRCODE = '42501',
                      DETAIL = 'A role that is not a superuser changes only the catalog rows of its own releases, schemas and snapshots and the declarations of tables it owns; a release names only a source its owner may read.',
                      HINT = 'Ask a superuser, or the owner of the release or table.';
        END IF;
    END LOOP;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
COMMENT ON FUNCTION anon._catalog_guard() IS
    'Internal: lets a role that is not a superuser change only its own catalog rows (trigger on the catalog tables).';

DO $triggers$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['releases', 'refresh_history', 'release_schemas', 'snapshots', 'column_roles',
                             'hierarchies', 'priorities', 'workload_profiles', 'release_versions',
                             'release_regions'] LOOP
        EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS catalog_guard ON anon.%I', t);
        EXECUTE pg_catalog.format('CREATE TRIGGER catalog_guard BEFORE INSERT OR UPDATE OR DELETE ON anon.%I '
                                  'FOR EACH ROW EXECUTE FUNCTION anon._catalog_guard()', t);
    END LOOP;
END
$triggers$;

-- anon.release_state: a stable release's check writes its people's row in one statement; the
-- same rule (rows of releases the role owns) is checked once per statement over the rows it
-- changed (transition tables).
CREATE OR REPLACE FUNCTION anon._release_people_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    foreign_release integer;
BEGIN
    IF (SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.rolname = current_user) THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        SELECT c.release_id INTO foreign_release FROM changed_old c
        WHERE NOT EXISTS (SELECT 1 FROM anon.releases x WHERE x.release_id = c.release_id
                          AND pg_catalog.pg_has_role(x.release_owner, 'MEMBER')) LIMIT 1;
    END IF;
    IF foreign_release IS NULL AND TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT c.release_id INTO foreign_release FROM changed_new c
        WHERE NOT EXISTS (SELECT 1 FROM anon.releases x WHERE x.release_id = c.release_id
                          AND pg_catalog.pg_has_role(x.release_owner, 'MEMBER')) LIMIT 1;
    END IF;
    IF foreign_release IS NOT NULL THEN
        RAISE EXCEPTION 'permission denied to change the release_state row of release % in anon.release_state', foreign_release
            USING ERRCODE = '42501',
                  DETAIL = 'A role that is not a superuser changes only the catalog rows of its own releases.',
                  HINT = 'Ask a superuser, or the owner of the release.';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION anon._release_people_guard() IS
    'Internal: lets a role that is not a superuser change only the anon.release_state rows of its own releases (statement triggers).';

DROP TRIGGER IF EXISTS people_guard_insert ON anon.release_state;
DROP TRIGGER IF EXISTS people_guard_update ON anon.release_state;
DROP TRIGGER IF EXISTS people_guard_delete ON anon.release_state;
CREATE TRIGGER people_guard_insert AFTER INSERT ON anon.release_state
    REFERENCING NEW TABLE AS changed_new FOR EACH STATEMENT EXECUTE FUNCTION anon._release_people_guard();
-- an UPDATE is checked on the rows as they were (a row moved away from a foreign release) and
-- as they are
CREATE TRIGGER people_guard_update AFTER UPDATE ON anon.release_state
    REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed_new FOR EACH STATEMENT
    EXECUTE FUNCTION anon._release_people_guard();
CREATE TRIGGER people_guard_delete AFTER DELETE ON anon.release_state
    REFERENCING OLD TABLE AS changed_old FOR EACH STATEMENT EXECUTE FUNCTION anon._release_people_guard();

-- A stable release's state and versions hold its people's hashes and record fingerprints and the
-- sensitive values each version published: its owner's alone (row security
-- hides rows, not values: a leakproof comparison on persons or records, run below the policy's
-- qual, told under EXPLAIN ANALYZE whether the policy's subplan ran). Custodians select only the
-- key columns of anon.release_state and anon.release_versions (what the WHERE clauses of their
-- own writes need: 900-privileges.sql) and write under row security; the values are read through
-- these views (their owner's rights read the tables), which show the rows of releases whose owner
-- the role running the query (current_user) is a member of, the policies' test. OFFSET 0 is the
-- fence: no condition of the querying role is evaluated on a row not shown.
CREATE OR REPLACE VIEW anon.readable_release_state WITH (security_barrier) AS
    SELECT shown.*
    FROM (SELECT s.*
          FROM anon.release_state s
          WHERE EXISTS (SELECT 1 FROM anon.releases r WHERE r.release_id = s.release_id
                        AND pg_catalog.pg_has_role(r.release_owner, 'MEMBER'))
          OFFSET 0) shown;
COMMENT ON VIEW anon.readable_release_state IS
    'Internal: the rows of anon.release_state of releases whose owner the querying role is a member of.';

CREATE OR REPLACE VIEW anon.readable_release_versions WITH (security_barrier) AS
    SELECT shown.*
    FROM (SELECT v.*
          FROM anon.release_versions v
          WHERE EXISTS (SELECT 1 FROM anon.releases r WHERE r.release_id = v.release_id
                        AND pg_catalog.pg_has_role(r.release_owner, 'MEMBER'))
          OFFSET 0) shown;
COMMENT ON VIEW anon.readable_release_versions IS
    'Internal: the rows of anon.release_versions of releases whose owner the querying role is a member of.';

CREATE OR REPLACE VIEW anon.readable_release_regions WITH (security_barrier) AS
    SELECT shown.*
    FROM (SELECT g.*
          FROM anon.release_regions g
          WHERE EXISTS (SELECT 1 FROM anon.releases r WHERE r.release_id = g.release_id
                        AND pg_catalog.pg_has_role(r.release_owner, 'MEMBER'))
          OFFSET 0) shown;
COMMENT ON VIEW anon.readable_release_regions IS
    'Internal: the rows of anon.release_regions of releases whose owner the querying role is a member of.';

-- one row per person, read through anon.readable_release_state as the querying role
CREATE OR REPLACE VIEW anon.release_people WITH (security_invoker = true) AS
SELECT s.release_id,
       pg_catalog.substr(s.persons, (32 * (u.o - 1) + 1)::integer, 32) AS person,
       u.member_group, s.candidate_sets -> u.cohort AS candidates, u.versions, u.last_version
FROM anon.readable_release_state s
     CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(s.member_groups), pg_catalog.unnest(s.cohorts),
                                   pg_catalog.unnest(s.versions), pg_catalog.unnest(s.last_versions))
         WITH ORDINALITY AS u(member_group, cohort, versions, last_version, o);
COMMENT ON VIEW anon.release_people IS
    'Releases refreshed in the stable mode, one row per person ever in the table (a salted hash of their identifiers): their class, the sensitive values every published version left them as candidates, the versions that published them, their last version in the table (older than the state''s for people gone since; NULL: stored before), of releases whose owner the querying role is a member of.';
