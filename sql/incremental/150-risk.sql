-- Every release stores its risk report (anon.risk_report's rows as a JSON array of
-- {measure, column_name, value, detail}) at creation and at every refresh (plpy_anon/db/risk.py).

ALTER TABLE anon.releases ADD COLUMN risk jsonb;

COMMENT ON COLUMN anon.releases.risk IS
    'Risk report of the current release (anon.risk_report rows: measure, column_name, value, detail), written at creation and every refresh; NULL if not computed (e.g. refreshed WITH NO DATA).';
