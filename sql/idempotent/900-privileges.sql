-- plpython3u is untrusted: nothing of ours runs unless the DBA grants it. Analysts read releases
-- (see anon.grant_analyst), never call these functions.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA anon FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA anon FROM PUBLIC;
