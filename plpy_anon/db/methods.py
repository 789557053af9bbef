"""The registry of release methods: ``anon.releases.method`` -> its ``ReleaseMethod`` (method.py).

Explicit on purpose: a seventh method adds its module and one entry below. Imported only by
releases.py (refresh, drop, the event trigger), the top of the db layer; the method modules
import the machinery below it (publish, refreshing, verify, release_rows), never this module.
"""
from __future__ import annotations

from plpy_anon.db import break_merge, fusion, mondrian, pattern, prioritized_mondrian, trust

REGISTRY = {m.RELEASE_METHOD.name: m.RELEASE_METHOD
            for m in (mondrian, prioritized_mondrian, break_merge, trust, pattern, fusion)}
