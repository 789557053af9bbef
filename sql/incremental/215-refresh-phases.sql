-- 0.2.0: where each refresh's time went: its phases (seconds by phase, adding up to the row's
-- seconds, the wall clock of the whole call), as anon.releases.metrics -> 'timing' has them for
-- the current version.
ALTER TABLE anon.refresh_history ADD COLUMN phases jsonb;
COMMENT ON COLUMN anon.refresh_history.phases IS
    'Seconds by phase of the refresh (prepare, locks, read, fit, publish, build, verify, republication, risk, record, swap, grants): they add up to seconds.';
