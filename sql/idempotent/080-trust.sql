-- Trust- and purpose-aware releases (paper 001): requesters, their trust, purposes and the
-- release whose degree of anonymisation follows trust and whose levels follow the purpose.

CREATE OR REPLACE FUNCTION anon.add_requester(requester text, role name)
RETURNS text
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import trust
return trust.add_requester(plpy, requester, role)
$$;
COMMENT ON FUNCTION anon.add_requester(text, name) IS
    'Registers a data requester and the (non-superuser) role its trust-aware releases are granted to. Returns the requester name.';

CREATE OR REPLACE FUNCTION anon.record_interaction(
    requester   text,
    outcome     text,
    recorded_at timestamptz DEFAULT NULL,
    note        text        DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import trust
return trust.record_interaction(plpy, requester, outcome, recorded_at, note)
$$;
COMMENT ON FUNCTION anon.record_interaction(text, text, timestamptz, text) IS
    'Records one interaction with a requester: outcome ''good'' (1), ''bad'' (0), ''neutral'' (0.5) or a number in [0, 1]; recorded_at defaults to now(). Returns the interaction id.';

CREATE OR REPLACE FUNCTION anon.add_recommendation(
    requester text,
    by        text,
    rating    double precision,
    by_trust  double precision DEFAULT NULL
)
RETURNS void
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import trust
trust.add_recommendation(plpy, requester, by, rating, by_trust)
$$;
COMMENT ON FUNCTION anon.add_recommendation(text, text, double precision, double precision) IS
    'Records (or replaces) the rating in [0, 1] that recommender "by" gives a requester. The rating is weighted by by_trust, or when NULL by the recommender''s own history-based trust if it is a requester, else 0.5.';

CREATE OR REPLACE FUNCTION anon.define_purpose(
    purpose     text,
    priorities  jsonb    DEFAULT NULL,
    derive_from regclass DEFAULT NULL,
    most_useful  text    DEFAULT NULL,
    least_useful text    DEFAULT NULL,
    replace     boolean  DEFAULT false
)
RETURNS jsonb
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import trust
return trust.define_purpose(plpy, purpose, priorities=priorities, derive_from=derive_from,
                            most=most_useful, least=least_useful, replace=replace)
$$;
COMMENT ON FUNCTION anon.define_purpose(text, jsonb, regclass, text, text, boolean) IS
    'Defines a purpose: explicit priorities (jsonb {"column": priority in [0, 1]}) or priorities derived from the normalized mutual information of derive_from''s columns, most_useful column = 1, least_useful = 0 (LEAST is a reserved word, hence the longer names). Returns the priorities.';

CREATE OR REPLACE FUNCTION anon.trust(
    requester      text,
    history_weight double precision DEFAULT 0.5,
    half_life_days double precision DEFAULT 180
)
RETURNS TABLE (history double precision, recommendation double precision, trust double precision,
               interactions integer, recommendations integer)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import trust
return trust.trust(plpy, requester, history_weight=history_weight, half_life_days=half_life_days)
$$;
COMMENT ON FUNCTION anon.trust(text, double precision, double precision) IS
    'A requester''s trust: the beta-reputation of its interactions (decayed with half_life_days), the trust-weighted mean of its recommendations, and their combination history_weight * history + (1 - history_weight) * recommendation.';

CREATE OR REPLACE FUNCTION anon.trust_view(
    source            regclass,
    requester         text,
    purpose           text,
    k                 integer          DEFAULT NULL,
    max_suppression   double precision DEFAULT 0.05,
    quasi_identifiers text[]           DEFAULT NULL,
    sensitive         text[]           DEFAULT NULL,
    identifiers       text[]           DEFAULT NULL,
    gamma             double precision DEFAULT 2,
    d_min             double precision DEFAULT 0,
    d_max             double precision DEFAULT 1,
    history_weight    double precision DEFAULT 0.5,
    half_life_days    double precision DEFAULT 180,
    min_share         double precision DEFAULT 0.1,
    level_weights     jsonb            DEFAULT NULL,
    release_name      text             DEFAULT NULL,
    release_schema    text             DEFAULT 'release',
    replace           boolean          DEFAULT false
)
RETURNS text
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import trust
return trust.trust_view(plpy, source, requester=requester, purpose=purpose, k=k,
                        max_suppression=max_suppression, quasi_identifiers=quasi_identifiers,
                        sensitive=sensitive, identifiers=identifiers, gamma=gamma, d_min=d_min,
                        d_max=d_max, history_weight=history_weight,
                        half_life_days=half_life_days, min_share=min_share,
                        level_weights=level_weights, release_name=release_name,
                        release_schema=release_schema, replace=replace, GD=GD)
$$;
COMMENT ON FUNCTION anon.trust_view(regclass, text, text, integer, double precision, text[], text[], text[], double precision, double precision, double precision, double precision, double precision, double precision, jsonb, text, text, boolean) IS
    'Creates a materialized view releasing the table for one requester and purpose, readable by the requester''s role only: trust T -> degree D = d_min + (d_max - d_min)(1 - T^gamma), split over the quasi-identifiers (low priority carries more) and mapped to hierarchy levels; with k, classes below k are generalized further / suppressed (cost in anon.releases.metrics). level_weights ({"column": [w1, ..., wH]}) weighs the hierarchy steps (Definition 2.1; default equal). Column roles as in anon.mondrian_view (quasi_identifiers, sensitive, identifiers). Refresh re-evaluates trust. Returns the qualified name.';

-- The run behind a trust-aware release, called from the release's own query. STABLE: it reads
-- the source in the query's snapshot, so the ctids it returns are those the join sees.
CREATE OR REPLACE FUNCTION anon._trust_partition(release_id integer)
RETURNS anon.partition
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import trust
return trust.partition(plpy, GD, release_id)
$$;
