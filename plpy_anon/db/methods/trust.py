"""Trust- and purpose-aware releases: requesters, trust, purposes, ``anon.trust_view``.

The release is a materialized view in the Mondrian pattern (see ``mondrian.py``):

    SELECT c.q0 AS "age", c.q1 AS "sex", ..., rs.s0 AS "salary"
    FROM anon._trust_partition(<release_id>) AS p                -- Python, once per refresh
    CROSS JOIN LATERAL (SELECT r.class_id, s."salary" AS s0
        FROM anon._partition_rows(p) AS r
        JOIN <source> AS s ON s.ctid = r.row_ctid                  -- (and tableoid)
        WHERE r.class_id >= 0                                      -- suppressed rows: class -1
        ORDER BY r.row_position OFFSET 0) AS rs                    -- shuffled release order
    JOIN LATERAL (SELECT x.class_no, x.q0::int4range AS q0, x.q1::text AS q1, ...
        FROM ROWS FROM (jsonb_array_elements_text(p.classes -> 'q0'), ...) WITH ORDINALITY
             AS x(q0, ..., class_no) OFFSET 0) AS c ON c.class_no = rs.class_id + 1

Each run re-evaluates the requester's trust and re-reads the purpose, so a refresh follows the
requester's latest history. Quasi-identifiers are released as text labels of their hierarchy level
(categorical) or as ranges (numbers, dates, timestamps: nested interval hierarchies; the root is
the unbounded range).
The release is granted to the requester's role only (``parameters.grantees``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pandas as pd

from plpy_anon.core.degree import DegreeRelease
from plpy_anon.core.errors import (
    DuplicateObject,
    InsufficientData,
    InvalidParameter,
    UndefinedObject,
    UnsupportedType,
)
from plpy_anon.core.purpose import MIPriorities, validate_priorities
from plpy_anon.core.trust import TrustProjection, evaluate_trust, history_score
from plpy_anon.db import columns as catalog
from plpy_anon.db import grants, guards, method
from plpy_anon.db.encodings import refuse_bytes_not_utf8
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.generalization import (
    check_float_digits,
    column_for,
    generalized_release_query,
    int_array_literal,
    release_positions,
)
from plpy_anon.db.identifiers import release_roles
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.reader import read_columns, refuse_non_finite
from plpy_anon.db.sqltext import jsonb, run
from plpy_anon.spec import ReleaseSpec, TrustSettings

METHOD = "trust"
OUTCOMES = {"good": 1.0, "bad": 0.0, "neutral": 0.5}
UNKNOWN_RECOMMENDER_TRUST = 0.5  # nothing known about the recommender: the Beta(1, 1) mean


# ---------------------------------------------------------------------------- requesters

def _named(plpy, query: str, name: str, what: str, hint: str) -> dict:
    """The row ``query`` finds for ``name`` ($1), or 42704 saying how to create it."""
    rows = run(plpy, query, ["text"], [name])
    if not rows:
        raise UndefinedObject(f'{what} "{name}" does not exist', hint=hint)
    return rows[0]


def _requester(plpy, requester, *, lock=False) -> dict:
    """``lock``: before history is written for the requester, touch its row (a no-op update):
    a concurrent delete then waits for this transaction and, at REPEATABLE READ or above, fails
    with a serialization error instead of deleting the requester without the history its
    snapshot does not see (history tables have no foreign key:
    sql/incremental/220-requester-history.sql)."""
    if lock:
        return _named(plpy, "UPDATE anon.requesters SET requester_name = requester_name "
                            "WHERE requester_name = $1 RETURNING requester_name, role_name::text",
                      requester, "requester",
                      "Register it first with anon.add_requester(requester, role => ...).")
    return _named(plpy, "SELECT requester_name, role_name::text AS role_name FROM anon.requesters "
                        "WHERE requester_name = $1", requester, "requester",
                  "Register it first with anon.add_requester(requester, role => ...).")


@sql_entry
def add_requester(plpy, requester, role):
    if requester is None or not requester.strip():
        raise InvalidParameter("a requester name is required", hint="Pass e.g. 'uni_research'.")
    role = grants.check_role(plpy, role)
    if run(plpy, "SELECT 1 FROM anon.requesters WHERE requester_name = $1", ["text"], [requester]):
        raise DuplicateObject(f'requester "{requester}" already exists',
                              hint="Choose another name; its history and recommendations are kept.")
    run(plpy, "INSERT INTO anon.requesters (requester_name, role_name) VALUES ($1, $2)",
        ["text", "name"], [requester, role])
    return requester


def parse_outcome(outcome) -> float:
    """'good' -> 1, 'bad' -> 0, 'neutral' -> 0.5, or a number in [0, 1] written as text."""
    text = (outcome or "").strip().lower()
    if text in OUTCOMES:
        return OUTCOMES[text]
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise InvalidParameter(f'outcome "{outcome}" is neither good, bad, neutral nor a number in [0, 1]',
                               hint="Pass outcome => 'good', 'bad', 'neutral' or e.g. '0.7'.")
    return value


@sql_entry
def record_interaction(plpy, requester, outcome, recorded_at, note):
    _requester(plpy, requester, lock=True)
    value = parse_outcome(outcome)
    return run(plpy, """
        INSERT INTO anon.interactions (requester_name, outcome, recorded_at, note)
        VALUES ($1, $2, coalesce($3::timestamptz, pg_catalog.now()), $4) RETURNING interaction_id""",
        ["text", "float8", "text", "text"], [requester, value, recorded_at, note])[0]["interaction_id"]


def _check_unit(value, name):
    if value is None or not 0.0 <= value <= 1.0:
        raise InvalidParameter(f"{name} must lie in [0, 1]; got {value}",
                               hint=f"Pass {name} between 0 (worst) and 1 (best).")


@sql_entry
def add_recommendation(plpy, requester, by, rating, by_trust):
    _requester(plpy, requester, lock=True)
    if by is None or not by.strip():
        raise InvalidParameter("the recommender (by) is required", hint="Pass by => 'partner_a'.")
    if by == requester:
        raise InvalidParameter(f'requester "{requester}" cannot recommend itself',
                               hint="Record its own behaviour with anon.record_interaction.")
    _check_unit(rating, "rating")
    if by_trust is not None:
        _check_unit(by_trust, "by_trust")
    run(plpy, """
        INSERT INTO anon.recommendations (requester_name, recommender, rating, recommender_trust)
        VALUES ($1, $2, $3, $4)
        ON CONFLICT (requester_name, recommender) DO UPDATE
        SET rating = EXCLUDED.rating, recommender_trust = EXCLUDED.recommender_trust,
            recorded_at = pg_catalog.now()""",
        ["text", "text", "float8", "float8"], [requester, by, rating, by_trust])


# ---------------------------------------------------------------------------- trust

EVIDENCE_QUERY = """
SELECT h.outcomes, h.ages, c.ratings, c.weights, c.recommenders, c.histories
FROM anon.requesters r
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(i.outcome), '{}') AS outcomes,
           coalesce(array_agg(extract(epoch FROM pg_catalog.now() - i.recorded_at)::float8 / 86400), '{}') AS ages
    FROM anon.interactions i WHERE i.requester_name = r.requester_name) h
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(x.rating ORDER BY x.recommender), '{}') AS ratings,
           coalesce(array_agg(x.recommender_trust ORDER BY x.recommender), '{}') AS weights,
           coalesce(array_agg(x.recommender ORDER BY x.recommender), '{}') AS recommenders,
           -- a recommender that is itself a requester: its own history, for the NULL weights
           coalesce(jsonb_object_agg(x.recommender, o.history) FILTER (WHERE o.history IS NOT NULL),
                    '{}') AS histories
    FROM anon.recommendations x
    LEFT JOIN LATERAL (
        SELECT jsonb_build_object(
                   'outcomes', coalesce(jsonb_agg(i.outcome) FILTER (WHERE i.interaction_id IS NOT NULL), '[]'),
                   'ages', coalesce(jsonb_agg(extract(epoch FROM pg_catalog.now() - i.recorded_at)::float8 / 86400)
                                    FILTER (WHERE i.interaction_id IS NOT NULL), '[]')) AS history
        FROM anon.requesters q LEFT JOIN anon.interactions i ON i.requester_name = q.requester_name
        WHERE q.requester_name = x.recommender
        HAVING count(*) > 0) o ON true
    WHERE x.requester_name = r.requester_name) c
WHERE r.requester_name = $1
"""


def evaluate(plpy, requester, *, history_weight, half_life_days):
    """TrustScores of ``requester`` plus the evidence counts, in one round trip."""
    _check_unit(history_weight, "history_weight")
    if half_life_days is None or not half_life_days > 0:
        raise InvalidParameter(f"half_life_days must be positive; got {half_life_days}",
                               hint="Pass e.g. 180, or 'infinity' for no decay.")
    rows = run(plpy, EVIDENCE_QUERY, ["text"], [requester])
    if not rows:
        _requester(plpy, requester)  # raises the clear error
    row = rows[0]
    histories = row["histories"]
    histories = jsonb(histories)
    weights = [w if w is not None else _recommender_trust(histories.get(name), half_life_days)
               for name, w in zip(row["recommenders"], row["weights"])]
    scores = evaluate_trust(row["outcomes"], row["ages"], row["ratings"], weights,
                            half_life=half_life_days, history_weight=history_weight)
    return scores, len(row["outcomes"]), len(row["ratings"])


def _recommender_trust(history, half_life_days):
    if history is None:
        return UNKNOWN_RECOMMENDER_TRUST
    return history_score(history["outcomes"], history["ages"], half_life=half_life_days)


@sql_entry
def trust(plpy, requester, *, history_weight, half_life_days):
    scores, n_interactions, n_recommendations = evaluate(
        plpy, requester, history_weight=history_weight, half_life_days=half_life_days)
    return [(scores.history, scores.recommendation, scores.trust, n_interactions,
             n_recommendations)]


# ---------------------------------------------------------------------------- purposes

def _purpose(plpy, purpose) -> dict:
    return jsonb(_named(plpy, "SELECT priorities FROM anon.purposes WHERE purpose_name = $1",
                        purpose, "purpose",
                        "Define it first with anon.define_purpose(purpose, priorities => ...).")
                 ["priorities"])


def _read_frame(plpy, tbl, cols) -> pd.DataFrame:
    """The columns as a DataFrame (numbers as floats with NaN for NULL, text as object)."""
    check_float_digits(plpy, tbl, cols)
    numeric = [c for c in cols if c.kind == "numeric"]
    categorical = [c for c in cols if c.kind == "categorical"]
    with catalog.hierarchy_text_settings(plpy):    # a hierarchical column's text as its leaves
        data = read_columns(plpy, tbl, numeric, categorical)
    frame = {}
    for col in cols:
        column = data.columns.get(col.name)
        if column is None:
            frame[col.name] = np.array([], dtype=object)
            continue
        values = column.values
        if col.kind == "numeric":
            _check_exact_in_float(tbl, col, values, column.null_mask)
        if col.kind == "numeric" and column.null_mask is not None and column.null_mask.any():
            values = np.where(column.null_mask, np.nan, values.astype(float))
        frame[col.name] = values
    return pd.DataFrame(frame), data


#: the interval hierarchies are built on float8 numbers, exact for integers up to 2^53
EXACT_IN_FLOAT = 2**53


def _check_exact_in_float(tbl, col, values, null_mask) -> None:
    """Refuse an integer column whose values a float8 cannot hold exactly: the default interval
    hierarchy is built on float8, where 2^63 - 1 becomes 2^63 and wraps around to -2^63 (an int8
    column at its extremes would fail with "hierarchy node ... has two parents")."""
    if values.dtype.kind != "i" or values.size == 0:
        return
    present = values if null_mask is None else values[~null_mask]
    if present.size and max(abs(int(present.max())), abs(int(present.min()))) > EXACT_IN_FLOAT:
        raise InvalidParameter(
            f'column "{col.name}" of {tbl.label} holds integers beyond 2^53 '
            f"({EXACT_IN_FLOAT:,}), which trust releases cannot generalize exactly",
            hint=f'Release a rescaled copy (e.g. "{col.name}" / 1000), or declare the column '
                 "ignored; anon.mondrian_view releases such values exactly.")


@sql_entry
def define_purpose(plpy, purpose, *, priorities, derive_from, most, least, replace):
    if purpose is None or not purpose.strip():
        raise InvalidParameter("a purpose name is required", hint="Pass e.g. 'demographics'.")
    exists = run(plpy, "SELECT 1 FROM anon.purposes WHERE purpose_name = $1", ["text"], [purpose])
    if exists and not replace:
        raise DuplicateObject(f'purpose "{purpose}" already exists',
                              hint="Pass replace => true to redefine it.")
    if (priorities is None) == (derive_from is None):
        raise InvalidParameter("give either priorities or derive_from (with most_useful and least_useful)",
                               hint="""E.g. priorities => '{"age": 1}' or derive_from => 'adult', most_useful => 'education', least_useful => 'race'.""")
    source, derivation = None, None
    if priorities is not None:
        given = jsonb(priorities)
        if not isinstance(given, dict):
            raise InvalidParameter("priorities must be a JSON object {column: priority}",
                                   hint="""E.g. '{"age": 1, "sex": 0.9}'::jsonb.""")
        result = validate_priorities(given, list(given)).to_dict()
    else:
        if most is None or least is None:
            raise InvalidParameter("deriving priorities needs most_useful and least_useful",
                                   hint="Name the most and least useful columns: most_useful => 'education', least_useful => 'race'.")
        tbl = guards.table(plpy, derive_from)
        cols = [c for c, role in catalog.resolve_roles(plpy, tbl, publishing=False)  # publishes nothing
                if role in ("quasi_identifier", "sensitive") and c.kind is not None]
        for name in (most, least):
            catalog.column_named(tbl, cols, name)
        refuse_bytes_not_utf8(plpy, tbl, [c.name for c in cols])
        frame, _ = _read_frame(plpy, tbl, cols)
        model = MIPriorities(most=most, least=least).fit(frame)
        result = {name: round(float(p), 6) for name, p in model.priorities_.items()}
        source = tbl.oid
        derivation = {"most": most, "least": least, "order": model.order_,
                      "mi_matrix": model.mi_matrix_.round(6).to_dict()}
    run(plpy, """
        INSERT INTO anon.purposes (purpose_name, priorities, source, derivation)
        VALUES ($1, $2, $3::oid::regclass, $4)
        ON CONFLICT (purpose_name) DO UPDATE
        SET priorities = EXCLUDED.priorities, source = EXCLUDED.source,
            derivation = EXCLUDED.derivation, created_at = pg_catalog.now()""",
        ["text", "jsonb", "oid", "jsonb"],
        [purpose, json.dumps(result), source, json.dumps(derivation) if derivation else None])
    return json.dumps(result)


# ---------------------------------------------------------------------------- the release

def _check_release_parameters(settings: TrustSettings):
    min_share = settings.min_share
    _check_unit(settings.max_suppression, "max_suppression")
    TrustProjection(gamma=settings.gamma, d_min=settings.d_min, d_max=settings.d_max)  # validates
    if min_share is None or not min_share >= 0:
        raise InvalidParameter(f"min_share must be >= 0; got {min_share}",
                               hint="0 keeps priority-1 attributes exact; the default is 0.1.")


def _release_priorities(tbl, cols, qis, priorities) -> dict:
    """Priorities for the release's quasi-identifiers: a priority for a column the table lacks is
    an error; columns released as is (sensitive) ignore theirs; QIs without one get 0."""
    names = [c.name for c in cols]
    for name in priorities:
        if name not in names:
            raise UndefinedObject(
                f'the purpose gives a priority to "{name}", which is not a column of '
                f"{tbl.label}",
                hint="Redefine the purpose for this table (anon.define_purpose(..., replace => true)).")
    return {c.name: float(priorities.get(c.name, 0.0)) for c in qis}


def resolve(plpy, tbl, spec: ReleaseSpec) -> method.Plan:
    promise, settings = spec.promise, spec.settings
    requester, purpose = settings.requester, settings.purpose
    role = _requester(plpy, requester)["role_name"]
    role = grants.check_role(plpy, role)
    priorities = _purpose(plpy, purpose)
    _check_release_parameters(settings)
    evaluate(plpy, requester, history_weight=settings.history_weight,
             half_life_days=settings.half_life_days)
    cols = catalog.table_columns(plpy, tbl)
    roles = release_roles(plpy, tbl, quasi_identifiers=promise.quasi_identifiers,
                          sensitive=promise.sensitive, identifiers=promise.identifiers, cols=cols)
    qis = [c for c, r in roles if r == "quasi_identifier"]
    if not qis:
        raise InvalidParameter(f"table {tbl.label} has no quasi-identifier to generalize",
                               hint="Pass quasi_identifiers => ARRAY[...].")
    for col in qis:
        catalog.check_quasi_identifier(tbl, col)
    parameters = {
        "requester": requester, "purpose": purpose, "k": promise.k,
        **{name: getattr(settings, name) for name in ("max_suppression", "gamma", "d_min",
                                                      "d_max", "history_weight", "min_share")},
        "half_life_days": _json_number(settings.half_life_days),
        "level_weights": _level_weights(settings.level_weights, [c.name for c in qis]),
        "priorities": _release_priorities(tbl, cols, qis, priorities),
        "quasi_identifiers": [c.name for c in qis],
        "sensitive": [c.name for c, r in roles if r == "sensitive"],
        "dropped": [c.name for c, r in roles if r in ("identifier", "ignored")],
        "grantees": [role],
    }

    def created(row):
        restrict_grants(plpy, row, role)
        _notice_cost(plpy, row)

    return method.Plan(
        parameters, default_name=f"{tbl.name}_{requester}_{purpose}",
        query=lambda release_id: release_query(plpy, tbl, roles, release_id), created=created)


def _level_weights(level_weights, qi_names) -> dict:
    """``{"column": [w1, ..., wH]}`` for quasi-identifiers; lengths are checked by the core."""
    if level_weights is None:
        return {}
    weights = jsonb(level_weights)
    if not isinstance(weights, dict) or not all(isinstance(w, list) for w in weights.values()):
        raise InvalidParameter("level_weights must be a JSON object {column: [w1, ..., wH]}",
                               hint="""E.g. '{"age": [1, 1, 2, 4, 8]}': one weight per hierarchy step.""")
    for name in weights:
        if name not in qi_names:
            raise UndefinedObject(f'level weights for "{name}", which is not a quasi-identifier '
                                  "of this release", hint="Quasi-identifiers: " + ", ".join(qi_names))
    return weights


def _json_number(value):
    return None if value is None or math.isinf(value) else value


def restrict_grants(plpy, release, role) -> None:
    """Only the requester's role reads the release: take back what create_release gave analysts."""
    relations = grants.release_relations(plpy, release)
    others = [r for r in grants.analysts(plpy) if r != role]
    for rel in relations:
        plpy.execute(f"REVOKE ALL ON {rel} FROM PUBLIC")
        if others:
            plpy.execute(f"REVOKE ALL ON {rel} FROM {', '.join(plpy.quote_ident(r) for r in others)}")
        plpy.execute(f"GRANT SELECT ON {rel} TO {plpy.quote_ident(role)}")
    grants.grant_usage(plpy, release["release_schema"], role)   # once: concurrent GRANTs collide


def _notice_cost(plpy, release) -> None:
    metrics = release["metrics"]
    metrics = jsonb(metrics)
    cost = metrics.get("cost", {})
    extra = sum(cost.get("extra_levels", {}).values())
    recoded = cost.get("rows_recoded", 0)
    if extra or recoded or cost.get("rows_suppressed"):
        plpy.notice(f"plpy_anon: reaching k = {metrics.get('k')} locally recoded {recoded} row(s) "
                    f"(up to {extra} extra hierarchy level(s) in all; degree "
                    f"{cost['requested_degree']:.3f} -> {cost['final_degree']:.3f}) and "
                    f"suppressed {cost['rows_suppressed']} row(s)")


def output_type(col) -> str:
    return catalog.NUMERIC_TYPES[col.type_name][1] if col.kind == "numeric" else "text"


def release_query(plpy, tbl, roles, release_id: int) -> str:
    """The materialized view's query: Mondrian's shape (see generalization.py); suppressed rows carry
    class id -1 and are left out."""
    qi_types = {c.name: output_type(c) for c, r in roles if r == "quasi_identifier"}
    return generalized_release_query(plpy, tbl, roles, qi_types,
                                     f"anon._trust_partition({int(release_id)})",
                                     literal_ranges=True)


# ---------------------------------------------------------------------------- the run

@sql_entry
def partition(plpy, GD, release_id: int):
    return method.run(RELEASE_METHOD, plpy, GD, release_id)


@dataclass
class TrustRead:
    qis: list
    scores: object
    priorities: dict
    degree: float
    frame: object
    data: object
    hierarchies: dict


def read(ctx: method.Run) -> TrustRead:
    plpy, settings = ctx.plpy, ctx.spec.settings
    tbl = guards.table_in_query(plpy, ctx.release["source"])
    by_name = {c.name: c for c in catalog.table_columns(plpy, tbl)}
    qis = [column_for(tbl, by_name, name) for name in ctx.spec.promise.quasi_identifiers]
    half_life = settings.half_life_days if settings.half_life_days is not None else math.inf
    scores, _, _ = evaluate(plpy, settings.requester, history_weight=settings.history_weight,
                            half_life_days=half_life)
    priorities = _release_priorities(tbl, list(by_name.values()), qis,
                                     _purpose(plpy, settings.purpose))
    degree = TrustProjection(gamma=settings.gamma, d_min=settings.d_min,
                             d_max=settings.d_max)(scores.trust)
    frame, data = _read_frame(plpy, tbl, qis)
    if data.n_rows == 0:
        raise InsufficientData(f"table {tbl.label} is empty",
                               hint="Load rows first; a release of no rows protects nothing.")
    refuse_non_finite(tbl, data, qis, "trust_view")
    _check_no_nulls(tbl, frame)
    hierarchies = {c.name: catalog.load_hierarchy(plpy, tbl, c.name)
                   for c in qis if c.kind == "categorical"}
    return TrustRead(qis, scores, priorities, degree, frame, data, hierarchies)


def fit(source: TrustRead, spec: ReleaseSpec) -> DegreeRelease:
    settings = spec.settings
    return DegreeRelease(source.degree, source.priorities,
                         hierarchies={n: h for n, h in source.hierarchies.items() if h},
                         level_weights=settings.level_weights, k=spec.promise.k,
                         max_suppression=settings.max_suppression,
                         min_share=settings.min_share).fit(source.frame)


def publish_partition(ctx: method.Run, source: TrustRead, model) -> tuple[dict, dict]:
    scores, data = source.scores, source.data
    class_ids, classes, sizes = _classes(model, source.qis)
    metrics = {
        "trust": {"history": scores.history, "recommendation": scores.recommendation,
                  "trust": scores.trust},
        "degree": source.degree, "view_degree": model.view_degree_, "k": ctx.spec.promise.k,
        "priorities": source.priorities,
        "requested_levels": {n: int(v) for n, v in model.requested_levels_.items()},
        "levels": {n: int(v) for n, v in model.levels_.items()},
        "cost": model.cost_,
    }
    stats = {"row_count": int(model.kept_.sum()),
             "achieved_k": int(sizes.min()) if sizes.size else None,
             "metrics": metrics, "source_rows": data.n_rows,
             "suppressed": int((~model.kept_).sum())}
    # suppressed rows (class -1) are shuffled as one more class; the release filters them out
    positions = release_positions(class_ids + 1)
    return ({"row_ctids": data.row_ctids, "class_ids": int_array_literal(class_ids),
             "row_positions": int_array_literal(positions), "classes": json.dumps(classes),
             "row_tableoids": data.row_tableoids}, stats)


def _check_no_nulls(tbl, frame) -> None:
    for name in frame.columns:
        if frame[name].isna().any():
            raise UnsupportedType(
                f'column "{name}" of {tbl.label} holds NULLs, which trust_view cannot '
                "place in a generalization hierarchy",
                hint="Fill them (e.g. 'unknown') or leave the column out of quasi_identifiers.")


def _classes(model, qis):
    """Per-row class ids (-1 = suppressed), per-QI class labels, and class sizes. Local
    recoding puts rows of one column at different levels: a class is one (level, value) per QI,
    and its label is that of its rows."""
    levels = model.row_levels_
    codes = np.column_stack([model.tables_[c.name].row_keys(levels[c.name].to_numpy())
                             for c in qis])
    kept = model.kept_
    class_ids = np.full(len(kept), -1, dtype=np.int64)
    if not kept.any():
        return class_ids, {f"q{i}": [] for i in range(len(qis))}, np.array([], dtype=np.int64)
    _, first, inverse, sizes = np.unique(codes[kept], axis=0, return_index=True,
                                         return_inverse=True, return_counts=True)
    class_ids[kept] = inverse.reshape(-1)
    first_rows = np.flatnonzero(kept)[first]       # one row of each class
    classes = {}
    for i, col in enumerate(qis):
        labels = model.tables_[col.name].row_labels(levels[col.name].to_numpy())[first_rows]
        classes[f"q{i}"] = [_literal(col, label) for label in labels]
    return class_ids, classes, sizes


def _literal(col, label):
    """Text for categorical QIs; for numeric ones a range literal: a value v is [v,v], an
    interval label [lo,hi) keeps its bounds, and the root * is the unbounded range. Dates and
    timestamps were generalized as numbers (days since 2000-01-01, epoch seconds), so their
    bounds are written back in the column's own type.

    A bound beyond what the column's type holds is left out (the range is unbounded on that
    side, still truthful): an interval of the default hierarchy may start below the type's
    minimum or end above its maximum, and a discrete type's [v, v] is stored as [v, v + 1),
    which overflows at the maximum (int4 columns at 2^31 - 1 or near -2^31 would fail with
    "integer out of range")."""
    if col.kind != "numeric":
        return label
    if label == "*":
        return "(,)"
    kind = catalog.NUMERIC_TYPES[col.type_name][2]
    range_type = catalog.NUMERIC_TYPES[col.type_name][1]
    bottom, top = TYPE_LIMITS.get(range_type, (None, None))
    if label.startswith("["):
        lo, hi = label[1:-1].split(",")
        return f"[{_clamped(kind, lo, bottom, top, '')},{_clamped(kind, hi, bottom, top, None)})"
    value = Decimal(label)
    if top is not None and (value > top or (range_type in DISCRETE and value == top)):
        # read as float8, a timestamp in the last millisecond of the type rounds past its end:
        # the release query merges the class's exact bounds into this range
        return f"[{_bound(kind, str(top))},)"
    if bottom is not None and value < bottom:
        return f"(,{_bound(kind, str(bottom))}]"
    return f"[{_bound(kind, label)},{_bound(kind, label)}]"


def _clamped(kind, number_text, bottom, top, below) -> str:
    """A bound inside the type's limits: one beyond its maximum is the maximum (a lower bound)
    or left out (an upper bound, ``below`` None); one below its minimum is left out (``below``
    "") or the minimum. The release query merges the class's exact bounds into the range."""
    value = Decimal(number_text)
    if top is not None and value > top:
        return "" if below is None else _bound(kind, str(top))
    if bottom is not None and value < bottom:
        return below if below is not None else _bound(kind, str(bottom))
    return _bound(kind, number_text)


EPOCH_DATE = np.datetime64("2000-01-01", "D")     # the reader's origin for dates
EPOCH_DAY = np.datetime64("1970-01-01", "D")      # and for timestamps (epoch seconds)
DISCRETE = ("int4range", "int8range", "daterange")
#: the smallest and largest value of each range's element type, as the number it is generalized
#: as (timestamps: 4714-11-24 BC and 294276-12-31 23:59:59, in epoch seconds)
TYPE_LIMITS = {
    "int4range": (-2**31, 2**31 - 1), "int8range": (-2**63, 2**63 - 1),
    "daterange": (int((np.datetime64("-4713-11-24", "D") - EPOCH_DATE).astype(np.int64)),
                  int((np.datetime64("5874897-12-31", "D") - EPOCH_DATE).astype(np.int64))),
    "tsrange": (-210866803200, 9224318015999), "tstzrange": (-210866803200, 9224318015999),
}


def _date_parts(day: np.datetime64) -> tuple[str, str]:
    """(date, era suffix) as PostgreSQL reads them: numpy writes astronomical years (year 0 is
    1 BC, -4712 is 4713 BC), which PostgreSQL takes for a time zone offset."""
    text = str(day)
    year, rest = int(text[:-6]), text[-6:]
    return (text, "") if year > 0 else (f"{1 - year:04d}{rest}", " BC")


def _date_text(day: np.datetime64) -> str:
    date, era = _date_parts(day)
    return date + era


def _timestamp_text(seconds: float, with_zone: bool) -> str:
    """Epoch seconds as a timestamp PostgreSQL reads, over its whole range (Python's datetime
    stops at years 1 and 9999: timestamps of 44 BC would raise an OverflowError)."""
    micros = round(seconds * 1e6)
    days, micros = divmod(micros, 86_400_000_000)
    date, era = _date_parts(EPOCH_DAY + np.timedelta64(days, "D"))
    hours, micros = divmod(micros, 3_600_000_000)
    minutes, micros = divmod(micros, 60_000_000)
    clock = f"{hours:02d}:{minutes:02d}:{micros // 1_000_000:02d}.{micros % 1_000_000:06d}"
    return f'"{date} {clock}{"+00" if with_zone else ""}{era}"'


def _bound(kind, number_text) -> str:
    """One range bound in the column's own type, from the number it was generalized as
    (integers through Decimal: a float has 53 bits, an int8 63)."""
    if kind == "int":
        return str(int(Decimal(number_text)))
    value = float(number_text)
    if kind == "float":
        return repr(value)
    if kind == "date":
        return _date_text(EPOCH_DATE + np.timedelta64(int(value), "D"))
    return _timestamp_text(value, kind == "timestamptz")


# the contract (plpy_anon/db/method.py), registered in plpy_anon/db/methods/registry.py
# the run reads the QIs; the sensitive columns go from the source to the release in SQL
RELEASE_METHOD = ReleaseMethod(METHOD, resolve=resolve, read=read, fit=fit, publish=publish_partition,
                               reads_text=lambda spec: spec.promise.quasi_identifiers)
