-- plpython3u is untrusted: nothing of ours runs unless the DBA grants it. Analysts read releases
-- (see anon.grant_analyst), never call these functions. GRANT EXECUTE ON FUNCTION anon.f is all a
-- role needs to call anon.f: its implementation anon_py.f is executable by PUBLIC and refuses
-- (42501) a caller without EXECUTE on anon.f (sql/build.py writes that check).
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA anon FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA anon FROM PUBLIC;
GRANT USAGE ON SCHEMA anon_py TO PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA anon_py TO PUBLIC;

-- Custodians (180-custodian.sql): call every function, keep the catalog's rows. They act with
-- their own rights: a custodian releases only tables it may read, into schemas it may create in.
GRANT USAGE ON SCHEMA anon TO plpy_anon_custodian;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA anon TO plpy_anon_custodian;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA anon TO plpy_anon_custodian;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA anon TO plpy_anon_custodian;
