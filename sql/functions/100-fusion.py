"""Fusion-resilient enterprise releases (FRED, seed 004): the identifier is kept, the sensitive
column suppressed, the numeric attributes microaggregated with MDAV, and k chosen against a
simulated fusion attack that joins the release with auxiliary facts on the identifier.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'fusion_scan',
        args=method_args('fusion', [
            'source',
            'sensitive',
            'identifier',
            'auxiliary',
            'k_from',
            'k_to',
            'attributes',
            'auxiliary_identifier',
            'attacker',
            'rules',
            'known_fraction',
            'min_protection',
            'min_utility',
            'w_protection',
            'w_utility',
            'random_state',
        ]),
        returns='TABLE ( k integer, n_groups integer, protection double precision, protection_no_fusion double precision, gain double precision, utility double precision, utility_normalized double precision, h double precision, admissible boolean, verdict text, protection_change double precision, attacker_r2 double precision )',
        python='fusion.fusion_scan', positional=1,
        comment="For each k in k_from..k_to: MDAV-microaggregates the numeric attributes, simulates the fusion attack (release joined with the auxiliary table on the identifier) and returns protection P∘P̂ and P∘P′ (standardized), the attacker's gain, utility 1/C_DM and |D|/C_DM, H and whether k meets the thresholds. Creates nothing.",
    ),
    release_function(
        'fusion',
        comment="Scans k like anon.fusion_scan, keeps the ks meeting min_protection and min_utility, refuses (22000) when the verdict is 'unprotected' unless accept_unprotected => true (then warns and records it), picks the one maximizing H and creates a materialized view with the identifier, the MDAV-microaggregated attributes and no sensitive column; the whole scan is stored in the release's catalog row (see anon.fusion_scan_of). Returns the view's qualified name.",
    ),
    function(
        'fusion_scan_of',
        args=[
            'release text',
        ],
        returns='TABLE ( k integer, n_groups integer, protection double precision, protection_no_fusion double precision, gain double precision, utility double precision, utility_normalized double precision, h double precision, admissible boolean, chosen boolean, verdict text, protection_change double precision, attacker_r2 double precision, accept_unprotected boolean )',
        python='fusion.fusion_scan_of', positional=1,
        comment='The k scan stored with a fusion-resilient release (name or schema.name), one row per k, with the chosen k flagged.',
    ),
]
