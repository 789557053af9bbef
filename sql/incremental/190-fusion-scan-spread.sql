-- 0.2.0: the fusion scan shows the spread of its repeated simulations (protection_sd). The
-- stored-scan function keeps its argument and changes its result columns, which CREATE OR
-- REPLACE cannot do: the old one goes first (nothing depends on it), the idempotent part
-- creates the new one.
DROP FUNCTION IF EXISTS anon.fusion_scan_of(text);
DROP FUNCTION IF EXISTS anon_py.fusion_scan_of(text);
