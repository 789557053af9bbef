-- plpython3u is untrusted: nothing of ours runs unless the DBA grants it. Analysts read releases
-- (see anon.grant_analyst), never call these functions. GRANT EXECUTE ON FUNCTION anon.f is all a
-- role needs to call anon.f: its implementation anon_py.f is executable by PUBLIC and refuses
-- (42501) a caller without EXECUTE on anon.f (sql/build.py writes that check).
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA anon FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA anon FROM PUBLIC;
GRANT USAGE ON SCHEMA anon_py TO PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA anon_py TO PUBLIC;

-- Custodians (180-custodian.sql): call every function, read the catalog, and change the rows
-- row security leaves them (their own releases, declarations of their own tables). They act with
-- their own rights: a custodian releases only tables it may read, into schemas it may create in.
GRANT USAGE ON SCHEMA anon TO plpy_anon_custodian;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA anon TO plpy_anon_custodian;
GRANT SELECT ON ALL TABLES IN SCHEMA anon TO plpy_anon_custodian;
GRANT INSERT, UPDATE, DELETE ON anon.releases, anon.release_schemas, anon.snapshots, anon.column_roles,
    anon.hierarchies, anon.priorities, anon.workload_profiles, anon.release_state, anon.release_versions,
    anon.release_regions TO plpy_anon_custodian;
-- A stable release's salt: no SELECT of its value (not even row-secured, which the planner lets
-- a role probe through leakproof functions and EXPLAIN ANALYZE); owners read their own through
-- anon.readable_release_secrets and write them under row security (035-catalog-guard.sql).
REVOKE ALL ON anon.release_secrets FROM plpy_anon_custodian;
GRANT SELECT (release_id) ON anon.release_secrets TO plpy_anon_custodian;
GRANT INSERT, UPDATE, DELETE ON anon.release_secrets TO plpy_anon_custodian;
GRANT SELECT ON anon.readable_release_secrets TO plpy_anon_custodian;
-- A hierarchy's leaves and paths are its column's values: custodians read only its keys, and a
-- build reads the paths through anon.readable_hierarchies, the rows of the columns it may read.
REVOKE SELECT ON anon.hierarchies FROM plpy_anon_custodian;
GRANT SELECT (source, column_name) ON anon.hierarchies TO plpy_anon_custodian;
GRANT SELECT ON anon.readable_hierarchies TO plpy_anon_custodian;
-- A stable release's state and versions (hashes, record fingerprints, published values): for the
-- same reason, custodians select only their keys, what their own writes' WHERE clauses need, and
-- read the values through anon.readable_release_state / _versions (035-catalog-guard.sql).
REVOKE SELECT ON anon.release_state, anon.release_versions, anon.release_regions FROM plpy_anon_custodian;
GRANT SELECT (release_id, chunk) ON anon.release_state TO plpy_anon_custodian;
GRANT SELECT (release_id, version) ON anon.release_versions TO plpy_anon_custodian;
GRANT SELECT (release_id, region) ON anon.release_regions TO plpy_anon_custodian;
GRANT SELECT ON anon.readable_release_state, anon.readable_release_versions, anon.release_people,
    anon.readable_release_regions TO plpy_anon_custodian;
GRANT INSERT ON anon.refresh_history TO plpy_anon_custodian;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA anon TO plpy_anon_custodian;
