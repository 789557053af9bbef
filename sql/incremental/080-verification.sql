-- Every release is checked from its released rows, in SQL, before it is published (see
-- plpy_anon/db/verify.py): whether the last build passed, and the figures the check measured
-- (rows expected and released, smallest class, distinct sensitive values per class, seconds).
-- NULL: not checked (e.g. a release refreshed WITH NO DATA). A build that fails the check is
-- never published, so a stored row says true; failures are in anon.refresh_history.

ALTER TABLE anon.releases
    ADD COLUMN verified     boolean,
    ADD COLUMN verification jsonb;

COMMENT ON COLUMN anon.releases.verified IS
    'The current release passed the check of its released rows (row count, smallest class >= k, distinct sensitive values >= l); NULL if not checked.';
COMMENT ON COLUMN anon.releases.verification IS
    'Figures of the last check: rows_expected, rows_released, classes, smallest_class, k, l, l_by_column, seconds, checked_at.';
