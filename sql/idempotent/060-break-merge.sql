-- Break-Merge releases (paper 003): a QI table (generalized QIs + gid) and one sensitive table
-- (gid, value, count) per sensitive attribute; Bayesian-network dependency detection over any
-- release; knowledge-breach probabilities of a plain vs a Break-Merge release.

CREATE OR REPLACE FUNCTION anon.break_merge(
    source            regclass,
    k                 integer,
    l                 integer DEFAULT NULL,
    sensitive         text[]  DEFAULT NULL,
    quasi_identifiers text[]  DEFAULT NULL,
    identifiers       text[]  DEFAULT NULL,
    max_categories    integer DEFAULT 64,
    max_rule_probability double precision DEFAULT NULL,
    release_name      text    DEFAULT NULL,
    release_schema    text    DEFAULT 'release',
    replace           boolean DEFAULT false
)
RETURNS text
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import break_merge
return break_merge.break_merge(plpy, source, k=k, l=l, sensitive=sensitive,
                               quasi_identifiers=quasi_identifiers, identifiers=identifiers,
                               max_categories=max_categories,
                               max_rule_probability=max_rule_probability,
                               release_name=release_name,
                               release_schema=release_schema, replace=replace, GD=GD)
$$;
COMMENT ON FUNCTION anon.break_merge(regclass, integer, integer, text[], text[], text[], integer, double precision, text, text, boolean) IS
    'Creates a Break-Merge release of the table (default name <table>_bm): views <name>_qit (generalized QIs of a k-anonymous Mondrian partition + gid), <name>_st_<attribute> (gid, value, count) per sensitive column, each group distinct l-diverse (groups merged when needed), and <name>_merged (the join on gid, weighted). With max_rule_probability (alpha), groups are merged until anon.detect_dependencies finds no QI -> sensitive rule reaching alpha on the release (checked again on the released views, and by every refresh; residual rules in anon.releases.metrics->''rule_check''); refused (22000) when no merge can. NULL (default): no rule check, QI -> SA rules may be readable. anon.refresh rebuilds all of them from one snapshot. Returns the storage relation''s qualified name.';

-- The run behind a Break-Merge release, called once by the storage view's query (MATERIALIZED
-- CTE). STABLE: it reads the source in the query's snapshot.
CREATE OR REPLACE FUNCTION anon._break_merge_run(release_id integer)
RETURNS jsonb
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import break_merge
return break_merge.run_release(plpy, GD, release_id)
$$;

CREATE OR REPLACE FUNCTION anon.detect_dependencies(
    release     text,
    risk        double precision DEFAULT 0.9,
    scope       text             DEFAULT 'all',
    min_support integer          DEFAULT NULL,
    max_parents integer          DEFAULT 3
)
RETURNS TABLE (parents text[], parent_values text[], child text, child_value text,
               probability double precision, support double precision,
               parent_support double precision)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import break_merge
return break_merge.detect_dependencies(plpy, release, risk=risk, scope=scope,
                                       min_support=min_support, max_parents=max_parents)
$$;
COMMENT ON FUNCTION anon.detect_dependencies(text, double precision, text, integer, integer) IS
    'Learns a Bayesian network (BIC hill climbing, QIs before sensitive attributes) over the released attributes of a release (scope qi, sensitive or all; a Break-Merge release is read through its merge view) and returns the dependency rules parents = values -> child = value whose conditional probability reaches risk, with their support (rows; default minimum: the release''s k).';

CREATE OR REPLACE FUNCTION anon.dependency_network(
    release     text,
    scope       text    DEFAULT 'all',
    max_parents integer DEFAULT 3
)
RETURNS TABLE (parent text, child text)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import break_merge
return break_merge.dependency_network(plpy, release, scope=scope, max_parents=max_parents)
$$;
COMMENT ON FUNCTION anon.dependency_network(text, text, integer) IS
    'The edges of the Bayesian network anon.detect_dependencies learns over a release.';

CREATE OR REPLACE FUNCTION anon.breach_report(
    release   text,
    threshold double precision DEFAULT 0.5
)
RETURNS TABLE (release_kind text, target text, known text, max_probability double precision,
               mean_probability double precision, n_above bigint)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import break_merge
return break_merge.breach_report(plpy, release, threshold=threshold)
$$;
COMMENT ON FUNCTION anon.breach_report(text, double precision) IS
    'Knowledge-breach probabilities: per sensitive attribute (target), the adversary''s probability of the most likely value knowing the QI group only (known NULL) or also one other sensitive value (known); max, mean over individuals and individuals at or above threshold. For a Break-Merge release, rows for the plain generalized release of the same partition and for the Break-Merge release.';
