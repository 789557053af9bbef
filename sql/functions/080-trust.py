"""Trust- and purpose-aware releases (paper 001): requesters, their trust, purposes and the release
whose degree of anonymisation follows trust and whose levels follow the purpose.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'add_requester',
        args=[
            'requester text',
            'role name',
        ],
        returns='text',
        python='trust.add_requester', positional=2,
        comment='Registers a data requester and the (non-superuser) role its trust-aware releases are granted to. Returns the requester name.',
    ),
    function(
        'record_interaction',
        args=[
            'requester text',
            'outcome text',
            'recorded_at timestamptz DEFAULT NULL',
            'note text DEFAULT NULL',
        ],
        returns='bigint',
        python='trust.record_interaction', positional=4,
        comment="Records one interaction with a requester: outcome 'good' (1), 'bad' (0), 'neutral' (0.5) or a number in [0, 1]; recorded_at defaults to now(). Returns the interaction id.",
    ),
    function(
        'add_recommendation',
        args=[
            'requester text',
            'by text',
            'rating double precision',
            'by_trust double precision DEFAULT NULL',
        ],
        returns='void',
        python='trust.add_recommendation', positional=4,
        comment='Records (or replaces) the rating in [0, 1] that recommender "by" gives a requester. The rating is weighted by by_trust, or when NULL by the recommender\'s own history-based trust if it is a requester, else 0.5.',
    ),
    function(
        'define_purpose',
        args=[
            'purpose text',
            'priorities jsonb DEFAULT NULL',
            'derive_from regclass DEFAULT NULL',
            'most_useful text DEFAULT NULL',
            'least_useful text DEFAULT NULL',
            'replace boolean DEFAULT false',
        ],
        returns='jsonb',
        python='trust.define_purpose', positional=1, rename={'most_useful': 'most', 'least_useful': 'least'},
        comment='Defines a purpose: explicit priorities (jsonb {"column": priority in [0, 1]}) or priorities derived from the normalized mutual information of derive_from\'s columns, most_useful column = 1, least_useful = 0 (LEAST is a reserved word, hence the longer names). Returns the priorities.',
    ),
    function(
        'trust',
        args=method_args('trust', ['requester', 'history_weight', 'half_life_days']),
        returns='TABLE (history double precision, recommendation double precision, trust double precision, interactions integer, recommendations integer)',
        volatility='STABLE',
        python='trust.trust', positional=1,
        comment="A requester's trust: the beta-reputation of its interactions (decayed with half_life_days), the trust-weighted mean of its recommendations, and their combination history_weight * history + (1 - history_weight) * recommendation.",
    ),
    release_function(
        'trust',
        comment='Creates a materialized view releasing the table for one requester and purpose, readable by the requester\'s role only: trust T -> degree D = d_min + (d_max - d_min)(1 - T^gamma), split over the quasi-identifiers (low priority carries more) and mapped to hierarchy levels; with k, classes below k are generalized further / suppressed (cost in anon.releases.metrics). level_weights ({"column": [w1, ..., wH]}) weighs the hierarchy steps (Definition 2.1; default equal). Column roles as in anon.mondrian_view (quasi_identifiers, sensitive, identifiers). Refresh re-evaluates trust. Returns the qualified name.',
    ),
]
