"""anon.release_audit: what a privacy officer signs off, one row per release, from the catalog.

Each release's method, promise (k, l, t, refresh mode), owner and readers (the relation's own
grants), when it was made and last refreshed, how many versions were published and what the
last one held back, the figures its build counted from the released rows, and a verdict with
its reasons. The figures are those the build recorded (anon.releases.verification and .risk,
which the release's owner can write): anon.risk_report and ``plpy-anon report`` count them again
from the rows.
"""
from __future__ import annotations

import json
import sys

from plpy_anon.db import release_rows
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.schedule import VERIFICATION_COLUMNS
from plpy_anon.db.sqltext import jsonb, run
from plpy_anon.spec import ReleaseSpec

AUDIT = f"""
SELECT r.release_id, pg_catalog.format('%I.%I', r.release_schema, r.release_name) AS release,
       r.method, r.parameters, r.risk, r.achieved_k, r.created_at, r.refreshed_at,
       r.last_error, r.last_error_at > coalesce(r.refreshed_at, r.created_at) AS last_refresh_failed,
       pg_catalog.pg_get_userbyid(r.release_owner) AS owner,
       1 + (SELECT count(*) FROM anon.refresh_history h
            WHERE h.release_id = r.release_id AND h.succeeded) AS versions,
       ARRAY(SELECT DISTINCT CASE a.grantee WHEN 0 THEN 'PUBLIC'
                                  ELSE pg_catalog.pg_get_userbyid(a.grantee)::text END
             FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
             WHERE c.relnamespace = r.schema_oid AND c.relname = r.release_name
               AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner
             ORDER BY 1) AS readers,
       {VERIFICATION_COLUMNS}
FROM anon.releases r
WHERE $1::int4 IS NULL OR r.release_id = $1
ORDER BY 2"""

#: the figures across versions the audit reads: integers where a build writes them
ACROSS_FIGURES = ("unsafe_unions", "unsafe_differences", "versions_compared", "disclosed",
                  "fewest_candidates", "held_back", "counterfeit")
INT4 = (-2**31, 2**31 - 1)

#: a class in which a sensitive column has one value gives that value away to anyone who knows
#: a member's quasi-identifiers, whatever the release promised
GIVES_AWAY_BELOW_L = 2


class _Unwritten(Exception):
    """A figure of a catalog row in a shape no build writes: its owner may write the row."""

    def __init__(self, column: str):
        super().__init__(column)
        self.column = column


def _parsed(value, column: str, kind: type):
    value = json.loads(value) if isinstance(value, str) else value
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise _Unwritten(column)
    return value


def _figure(value, column: str, *, integer: bool = False):
    """A number as a build records it (None: not counted); an int4 when ``integer``."""
    if value is None:
        return None
    # bool is an int to Python, and an int beyond float8 or a non-finite float has no SQL column
    ok = (isinstance(value, int) and INT4[0] <= value <= INT4[1]) if integer else (
        isinstance(value, (int, float)) and abs(value) <= sys.float_info.max)
    if isinstance(value, bool) or not ok:
        raise _Unwritten(column)
    return value


def _figures(risk) -> dict:
    """{(measure, column): value} of a stored risk report."""
    figures = {}
    for r in _parsed(risk, "risk", list):
        if not isinstance(r, dict) or not isinstance(r.get("measure"), str) or not isinstance(
                r.get("column_name"), (str, type(None))):
            raise _Unwritten("risk")
        figures[(r["measure"], r["column_name"])] = _figure(r.get("value"), "risk")
    return figures


def _verification(verification) -> tuple[dict, dict | None]:
    """The verification's l per sensitive column and its figures across versions, checked."""
    verification = _parsed(verification, "verification", dict)
    by_column = _parsed(verification.get("l_by_column"), "verification", dict)
    by_column = {c: _figure(v, "verification") for c, v in by_column.items()}
    across = verification.get("across_versions")
    if across is not None:
        across = {name: _figure(value, "verification", integer=True) if name in ACROSS_FIGURES else value
                  for name, value in _parsed(across, "verification", dict).items()}
    return by_column, across


def _number(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) and not float(value).is_integer() else f"{value:g}"


def judge(row: dict) -> dict:
    """The audit row of one catalog row (``AUDIT``): the figures and (safe, why)."""
    # as stored, unchecked: the audit reports what was promised, as the verification reads it
    promise = ReleaseSpec.decode(row["method"], jsonb(row["parameters"]) or {}, checked=False).promise
    try:
        figures = _figures(row["risk"])
        by_column, across = _verification(row["verification"])
    except _Unwritten as unwritten:
        return _unreadable(row, promise, unwritten.column)
    sensitive = sorted({c for (_, c) in figures if c is not None})
    distinct_l = {c: figures.get(("distinct_l", c)) for c in sensitive}
    t_found = [v for (m, _), v in figures.items() if m == "t_closeness" and v is not None]
    k, l, t = promise.k, promise.l, promise.t
    fails, passes = [], []

    def check(ok: bool, text: str) -> None:
        (passes if ok else fails).append(text)

    check(bool(row["verified"]), "verified from its released rows" if row["verified"] else
          "not verified from its released rows (its relation is missing or empty, or the check failed)")
    if k is not None:
        check(row["achieved_k"] is not None and row["achieved_k"] >= k,
              f"k {k} asked, smallest class {row['achieved_k']}")
    if l is not None:
        asked = f"l {_number(l)} ({promise.l_diversity}) asked"
        if not by_column:
            check(False, f"{asked}, not counted by the check of its rows")
        for column in sorted(by_column):
            found = by_column[column]
            check(found is not None and found >= l,
                  f"{asked}, {column} has {_number(found) if found is not None else 'no count'}")
    for column, found in distinct_l.items():
        if found is not None and (l is None or found < GIVES_AWAY_BELOW_L):
            check(found >= GIVES_AWAY_BELOW_L,
                  f"every class has {_number(found)} or more distinct {column} values" if found >= GIVES_AWAY_BELOW_L
                  else f"some class gives its {column} value away (distinct l {_number(found)})")
    if t is not None:
        worst = max(t_found) if t_found else None
        check(worst is not None and worst <= t, f"t {_number(t)} asked, t-closeness {_number(worst)}"
              if worst is not None else f"t {_number(t)} asked, t-closeness not counted")
    if across:
        unsafe = (across.get("unsafe_unions") or 0) + (across.get("unsafe_differences") or 0)
        compared = across.get("versions_compared") or 0
        check(unsafe == 0 and not across.get("disclosed"),
              f"against {compared} earlier version{'' if compared == 1 else 's'}: fewest candidates "
              f"{across.get('fewest_candidates')}, {unsafe} unsafe unions or differences, "
              f"{across.get('disclosed') or 0} disclosed")
    notes = []
    if not promise.sensitive:
        notes.append("no sensitive column declared: attribute disclosure is not checked")
    if row["last_refresh_failed"]:
        notes.append("its last refresh failed (last_error): the version before it is still published")
    if not row["readers"]:
        notes.append("no role but its owner and superusers reads it")
    why = " ".join([f"fails: {'; '.join(fails)}." if fails else "",
                    f"holds: {'; '.join(passes)}." if passes else ""]).strip()
    if notes:
        why += " " + "; ".join(notes) + "."
    return {
        "release": row["release"], "method": row["method"], "owner": row["owner"],
        "readers": row["readers"], "refresh_mode": promise.refresh_mode,
        "k": k, "l": l, "t": t, "achieved_k": row["achieved_k"],
        "distinct_l": min((v for v in distinct_l.values() if v is not None), default=None),
        "t_closeness": max(t_found) if t_found else None,
        "prosecutor_risk_max": figures.get(("prosecutor_risk_max", None)),
        "verified": row["verified"], "created_at": row["created_at"], "refreshed_at": row["refreshed_at"],
        "versions": row["versions"],
        "held_back": (across or {}).get("held_back"), "counterfeit": (across or {}).get("counterfeit"),
        "last_error": row["last_error"], "safe": not fails, "why": why,
    }


def _unreadable(row: dict, promise, column: str) -> dict:
    """The audit row of a release whose catalog row holds figures in a shape no build writes:
    not safe, its figures not shown."""
    return {
        "release": row["release"], "method": row["method"], "owner": row["owner"],
        "readers": row["readers"], "refresh_mode": promise.refresh_mode,
        "k": promise.k, "l": promise.l, "t": promise.t, "achieved_k": row["achieved_k"],
        "distinct_l": None, "t_closeness": None, "prosecutor_risk_max": None,
        "verified": row["verified"], "created_at": row["created_at"], "refreshed_at": row["refreshed_at"],
        "versions": row["versions"], "held_back": None, "counterfeit": None,
        "last_error": row["last_error"], "safe": False,
        "why": f"fails: its recorded {column} is not as a build writes it (anon.releases.{column}, "
               "which its owner can write); anon.risk_report counts its figures again from its rows.",
    }


@sql_entry
def release_audit(plpy, name: str | None = None) -> list[dict]:
    """anon.release_audit(release DEFAULT NULL): every release, or the one named."""
    release_id = None if name is None else release_rows.find(plpy, name, genuine=False)["release_id"]
    return [judge(row) for row in run(plpy, AUDIT, ["int4"], [release_id])]
