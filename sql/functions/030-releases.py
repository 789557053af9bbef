"""The release machinery every method plugs into: find, refresh, drop, and the bookkeeping that
keeps anon.releases true whether a release is refreshed through anon.refresh() or by a plain
REFRESH MATERIALIZED VIEW.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'refresh',
        args=[
            'release text',
        ],
        returns='anon.releases',
        python='releases.refresh', positional=1, gd=True,
        comment="Re-anonymizes a release from the source's current data and returns its updated catalog row. The new release is built beside the old one (readers keep the old) and swapped in, in one transaction; readers at every isolation level see the old or the new release whole. The swap takes its lock in attempts of plpy_anon.swap_lock_timeout (default 200ms: new readers never wait longer behind it) for at most plpy_anon.swap_wait in all (default 60s); past that, long-running readers still hold the release and the refresh fails with SQLSTATE 55P03. On any failure the previous release stays and the error is recorded in anon.refresh_history and anon.releases.last_error.",
    ),
    function(
        'drop_release',
        args=[
            'release text',
            'if_exists boolean DEFAULT false',
        ],
        returns='boolean',
        python='releases.drop_release', positional=2,
        comment="Drops a release's objects and its catalog row.",
    ),
]
