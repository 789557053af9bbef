-- 0.2.0: functions that keep their arguments and gain result columns, which CREATE OR REPLACE
-- cannot do: the old ones go first (nothing depends on them), the idempotent part creates the new
-- ones. anon.fusion_scan_of: the spread of the repeated simulations (protection_sd);
-- anon.distortion: the localities kept exactly (preserved_strict).
DROP FUNCTION IF EXISTS anon.fusion_scan_of(text);
DROP FUNCTION IF EXISTS anon_py.fusion_scan_of(text);
DROP FUNCTION IF EXISTS anon.distortion(regclass, text);
DROP FUNCTION IF EXISTS anon_py.distortion(regclass, text);
