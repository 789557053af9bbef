-- 0.2.0: anon.fusion_scan and anon.fusion_scan_of gain a result column (saturated: more k buys no
-- measurable protection), which CREATE OR REPLACE cannot do: the old ones go first (nothing
-- depends on them), the idempotent part creates the new ones.
DROP FUNCTION IF EXISTS anon.fusion_scan(regclass, text, text, regclass, integer, integer, text[],
    text, text, jsonb, double precision, double precision, double precision, double precision,
    double precision, integer, integer);
DROP FUNCTION IF EXISTS anon_py.fusion_scan(regclass, text, text, regclass, integer, integer,
    text[], text, text, jsonb, double precision, double precision, double precision,
    double precision, double precision, integer, integer);
DROP FUNCTION IF EXISTS anon.fusion_scan_of(text);
DROP FUNCTION IF EXISTS anon_py.fusion_scan_of(text);
