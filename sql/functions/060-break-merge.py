"""Break-Merge releases (paper 003): a QI table (generalized QIs + gid) and one sensitive table
(gid, value, count) per sensitive attribute; Bayesian-network dependency detection over any
release; knowledge-breach probabilities of a plain vs a Break-Merge release.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    release_function(
        'break_merge',
        comment="Creates a Break-Merge release of the table (default name <table>_bm): views <name>_qit (generalized QIs of a k-anonymous Mondrian partition + gid), <name>_st_<attribute> (gid, value, count) per sensitive column, each group distinct l-diverse (groups merged when needed), and <name>_merged (the join on gid, weighted). With max_rule_probability (alpha), groups are merged until anon.detect_dependencies finds no QI -> sensitive rule reaching alpha on the release (checked again on the released views, and by every refresh; residual rules in anon.releases.metrics->'rule_check'); refused (22000) when no merge can. NULL (default): no rule check, QI -> SA rules may be readable. anon.refresh rebuilds all of them from one snapshot. Returns the storage relation's qualified name.",
    ),
    function(
        'detect_dependencies',
        args=[
            'release text',
            'risk double precision DEFAULT 0.9',
            "scope text DEFAULT 'all'",
            'min_support integer DEFAULT NULL',
            'max_parents integer DEFAULT 3',
        ],
        returns='TABLE (parents text[], parent_values text[], child text, child_value text, probability double precision, support double precision, parent_support double precision)',
        volatility='STABLE',
        python='break_merge.detect_dependencies', positional=1,
        comment="Learns a Bayesian network (BIC hill climbing, QIs before sensitive attributes) over the released attributes of a release (scope qi, sensitive or all; a Break-Merge release is read through its merge view) and returns the dependency rules parents = values -> child = value whose conditional probability reaches risk, with their support (rows; default minimum: the release's k).",
    ),
    function(
        'dependency_network',
        args=[
            'release text',
            "scope text DEFAULT 'all'",
            'max_parents integer DEFAULT 3',
        ],
        returns='TABLE (parent text, child text)',
        volatility='STABLE',
        python='break_merge.dependency_network', positional=1,
        comment='The edges of the Bayesian network anon.detect_dependencies learns over a release.',
    ),
    function(
        'breach_report',
        args=[
            'release text',
            'threshold double precision DEFAULT 0.5',
        ],
        returns='TABLE (release_kind text, target text, known text, max_probability double precision, mean_probability double precision, n_above bigint)',
        python='break_merge.breach_report', positional=1,
        comment="Knowledge-breach probabilities: per sensitive attribute (target), the adversary's probability of the most likely value knowing the QI group only (known NULL) or also one other sensitive value (known); max, mean over individuals and individuals at or above threshold. For a Break-Merge release, rows for the plain generalized release of the same partition and for the Break-Merge release.",
    ),
]
