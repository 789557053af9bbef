-- Fusion-resilient enterprise releases (FRED, seed 004): the identifier is kept, the sensitive
-- column suppressed, the numeric attributes microaggregated with MDAV, and k chosen against a
-- simulated fusion attack that joins the release with auxiliary facts on the identifier.

CREATE OR REPLACE FUNCTION anon.fusion_scan(
    source               regclass,
    sensitive            text,
    identifier           text,
    auxiliary            regclass,
    k_from               integer          DEFAULT 2,
    k_to                 integer          DEFAULT 30,
    attributes           text[]           DEFAULT NULL,
    auxiliary_identifier text             DEFAULT NULL,
    attacker             text             DEFAULT 'regression',
    rules                jsonb            DEFAULT NULL,
    known_fraction       double precision DEFAULT 0.1,
    min_protection       double precision DEFAULT 0,
    min_utility          double precision DEFAULT 0,
    w_protection         double precision DEFAULT 0.5,
    w_utility            double precision DEFAULT 0.5,
    random_state         integer          DEFAULT 0
)
RETURNS TABLE (
    k                    integer,
    n_groups             integer,
    protection           double precision,
    protection_no_fusion double precision,
    gain                 double precision,
    utility              double precision,
    utility_normalized   double precision,
    h                    double precision,
    admissible           boolean,
    verdict              text,
    protection_change    double precision,
    attacker_r2          double precision
)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import fusion
return fusion.fusion_scan(plpy, source, sensitive=sensitive, identifier=identifier,
                          auxiliary=auxiliary, k_from=k_from, k_to=k_to, attributes=attributes,
                          auxiliary_identifier=auxiliary_identifier, attacker=attacker,
                          rules=rules, known_fraction=known_fraction,
                          min_protection=min_protection, min_utility=min_utility,
                          w_protection=w_protection, w_utility=w_utility,
                          random_state=random_state)
$$;
COMMENT ON FUNCTION anon.fusion_scan(regclass, text, text, regclass, integer, integer, text[], text, text, jsonb, double precision, double precision, double precision, double precision, double precision, integer) IS
    'For each k in k_from..k_to: MDAV-microaggregates the numeric attributes, simulates the fusion attack (release joined with the auxiliary table on the identifier) and returns protection P∘P̂ and P∘P′ (standardized), the attacker''s gain, utility 1/C_DM and |D|/C_DM, H and whether k meets the thresholds. Creates nothing.';

CREATE OR REPLACE FUNCTION anon.fusion_resilient_view(
    source               regclass,
    sensitive            text,
    identifier           text,
    auxiliary            regclass,
    min_protection       double precision DEFAULT 0,
    min_utility          double precision DEFAULT 0,
    w_protection         double precision DEFAULT 0.5,
    w_utility            double precision DEFAULT 0.5,
    k_from               integer          DEFAULT 2,
    k_to                 integer          DEFAULT 30,
    attributes           text[]           DEFAULT NULL,
    auxiliary_identifier text             DEFAULT NULL,
    attacker             text             DEFAULT 'regression',
    rules                jsonb            DEFAULT NULL,
    known_fraction       double precision DEFAULT 0.1,
    random_state         integer          DEFAULT 0,
    release_name         text             DEFAULT NULL,
    release_schema       text             DEFAULT 'release',
    replace              boolean          DEFAULT false,
    accept_unprotected   boolean          DEFAULT false
)
RETURNS text
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import fusion
return fusion.fusion_resilient_view(
    plpy, source, sensitive=sensitive, identifier=identifier, auxiliary=auxiliary,
    min_protection=min_protection, min_utility=min_utility, w_protection=w_protection,
    w_utility=w_utility, k_from=k_from, k_to=k_to, attributes=attributes,
    auxiliary_identifier=auxiliary_identifier, attacker=attacker, rules=rules,
    known_fraction=known_fraction, random_state=random_state, release_name=release_name,
    release_schema=release_schema, replace=replace, accept_unprotected=accept_unprotected, GD=GD)
$$;
COMMENT ON FUNCTION anon.fusion_resilient_view(regclass, text, text, regclass, double precision, double precision, double precision, double precision, integer, integer, text[], text, text, jsonb, double precision, integer, text, text, boolean, boolean) IS
    'Scans k like anon.fusion_scan, keeps the ks meeting min_protection and min_utility, refuses (22000) when the verdict is ''unprotected'' unless accept_unprotected => true (then warns and records it), picks the one maximizing H and creates a materialized view with the identifier, the MDAV-microaggregated attributes and no sensitive column; the whole scan is stored in the release''s catalog row (see anon.fusion_scan_of). Returns the view''s qualified name.';

CREATE OR REPLACE FUNCTION anon.fusion_scan_of(release text)
RETURNS TABLE (
    k                    integer,
    n_groups             integer,
    protection           double precision,
    protection_no_fusion double precision,
    gain                 double precision,
    utility              double precision,
    utility_normalized   double precision,
    h                    double precision,
    admissible           boolean,
    chosen               boolean,
    verdict              text,
    protection_change    double precision,
    attacker_r2          double precision,
    accept_unprotected   boolean
)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import fusion
return fusion.fusion_scan_of(plpy, release)
$$;
COMMENT ON FUNCTION anon.fusion_scan_of(text) IS
    'The k scan stored with a fusion-resilient release (name or schema.name), one row per k, with the chosen k flagged.';

-- The MDAV run behind a fusion-resilient release, called from the release's own query. STABLE so
-- that it reads the source in the same snapshot as the query that joins its result back by ctid.
CREATE OR REPLACE FUNCTION anon._fusion_partition(release_id integer)
RETURNS anon.partition
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import fusion
return fusion.partition(plpy, GD, release_id)
$$;
