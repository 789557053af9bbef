"""Issue 3: application-aware releases. The analysts' workload (pg_stat_statements, anon.workload,
server logs loaded by the client) -> attribute priorities and predicate cut points ->
prioritized Mondrian -> the release report (C_DM, C_WDM, NCP, workload precision).

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'learn_priorities',
        args=[
            'source regclass',
            'projection_share double precision DEFAULT 0.5',
            'use_pg_stat_statements boolean DEFAULT true',
        ],
        returns='TABLE (column_name name, projection bigint, selection bigint, group_by bigint, order_by bigint, weight double precision)',
        python='workload.learn_priorities', positional=1,
        comment='Parses the workload (anon.workload, and pg_stat_statements when installed), counts how each column of the table is used (SELECT list, WHERE/JOIN/HAVING, GROUP BY, ORDER BY), stores the normalized weights in anon.priorities and the predicate cut points in anon.workload_profiles, and returns the weights. Unparseable statements are counted in a NOTICE, never fatal.',
    ),
    release_function(
        'prioritized_mondrian',
        comment=("Prioritized Mondrian release (materialized view): priorities => 'learned' (from anon.learn_priorities), a JSON object of column weights, or 'none' (text), or explicit weights as jsonb, e.g. '{\"age\": 1, \"sex\": 0}'::jsonb; target => a class column adds information gain to the split score; cut_points => true snaps cuts to the workload's predicate constants; l, l_diversity, c, t and split as for the plain anon.mondrian_view. Returns the release's qualified name."),
    ),
    function(
        'release_report',
        args=[
            'release text',
            'wdm_weights jsonb DEFAULT NULL',
        ],
        returns='TABLE (release_name text, method text, k integer, achieved_k integer, classes integer, row_count bigint, c_dm bigint, c_wdm double precision, ncp_percent double precision, ncp_per_attribute jsonb, weights jsonb, workload_queries integer, mean_precision double precision, mean_recall double precision, weighted_precision double precision, weighted_recall double precision)',
        python='workload.release_report', positional=2,
        comment="Utility of a Mondrian-family release: k, C_DM, weighted discernibility C_WDM (each row charged, per quasi-identifier, the source rows whose value lies in its released region; weights: wdm_weights, else the source's learned priorities, else equal -- never the release's own, so that releases of one source compare), NCP overall and per attribute, and the precision/recall of the stored workload's predicates on the quasi-identifiers; the figures are also stored in anon.releases.metrics.",
    ),
    function(
        'workload_precision',
        args=[
            'release text',
        ],
        returns='TABLE (query text, frequency bigint, true_rows bigint, released_rows bigint, answer_precision double precision, answer_recall double precision)',
        python='workload.workload_precision', positional=1,
        comment="Per stored query with a predicate on the release's quasi-identifiers: rows satisfying it in the source, rows whose released class may satisfy it, precision and recall.",
    ),
]
