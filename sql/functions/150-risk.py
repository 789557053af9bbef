"""Risk of any relation (issue 15): re-identification (prosecutor, journalist, marketer) and
attribute disclosure (distinct / entropy / recursive l, t-closeness) figures, counted in SQL.
Every release also stores its report in anon.releases.risk at creation and refresh.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'risk_report',
        args=[
            'relation regclass',
            'quasi_identifiers text[] DEFAULT NULL',
            'sensitive text[] DEFAULT NULL',
            'population bigint DEFAULT NULL',
            'risk_threshold double precision DEFAULT 0.2',
            'recursive_c double precision DEFAULT 3',
        ],
        returns='TABLE (measure text, column_name text, value double precision, detail text)',
        python='risk_report.risk_report', positional=1,
        comment="Risk figures of a table, partitioned table, view, materialized view or release, one a row (column_name: the sensitive column, NULL for the whole relation; value NULL where not applicable, detail says why): rows, classes, smallest_class (k), records_in_classes_below_2/5/10, prosecutor_risk_max/avg, prosecutor_records_at_risk (1/class size > risk_threshold); with population (the size of the population the relation is a sample of) journalist_risk_max, journalist_records_at_risk and marketer_risk, with population class sizes estimated as f*N/n; per sensitive column distinct_l, entropy_l, recursive_cl_l (largest l for c = recursive_c) and t_closeness (equal-distance EMD for categories, ordered EMD for numbers and dates). Classes are the GROUP BY of the quasi-identifiers (NULL a value of its own). Quasi-identifiers and sensitive columns: the arguments, else for a release those of its catalog row (its released columns), else those declared with anon.set_column_role; none is an error. Runs with the caller's privileges. See docs/risk.md.",
    ),
]
