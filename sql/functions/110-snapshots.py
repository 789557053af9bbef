"""Releases that leave the database: a snapshot (a plain table pg_dump -t carries to a server
without plpy_anon) and the metadata that travels with a snapshot or an export (plpy-anon export).
See docs/export.md.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'snapshot',
        args=[
            'release text',
            'snapshot_name text DEFAULT NULL',
            'snapshot_schema text DEFAULT NULL',
            'replace boolean DEFAULT false',
        ],
        returns='text',
        python='snapshots.snapshot', positional=1,
        comment="Copies a genuine release into a plain table owned by the caller and granted to nobody: exactly the release's columns (core types only; others refused, 42804) and rows, no dependency on the source or on the extension, so pg_dump -t carries it to a server without plpy_anon. NULL snapshot_schema: the schema \"snapshot\" (created if missing; never a release schema); NULL snapshot_name: <relation>_<yyyymmdd>. A release of several relations (Break-Merge) is refused; name each relation (schema.relation) instead. Its COMMENT and its anon.snapshots row hold the release's metadata (method, parameters, achieved k, when built). An existing name is refused unless replace => true and it is a snapshot. Snapshots outlive refreshes and anon.drop_release. Returns the table's qualified name.",
    ),
    function(
        'release_metadata',
        args=[
            'release text',
        ],
        returns='jsonb',
        volatility='STABLE',
        python='snapshots.release_metadata', positional=1,
        comment="What travels with a snapshot or an export of a genuine release: release, relation, method, parameters, achieved k, row count, verified, created and refreshed at, extension version, columns, and the risk report when the catalog has one. A release of several relations is refused; name one of its relations.",
    ),
]
