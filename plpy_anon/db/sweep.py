"""``anon.sweep``: what a Mondrian release of a table would give for several k, publishing nothing.

The source is read and encoded once, as a release would read it (the same columns, guards and
defaults as ``anon.mondrian_view``), then partitioned once per k. Each row of the result is the
partition's figures: classes, smallest class, information loss (NCP, C_DM, C_AVG) and the
prosecutor risk of its classes. A published release groups rows by their released values, and
classes whose values coincide only merge, so its risk is at most the sweep's and its smallest
class at least the sweep's: the sweep is the conservative side of each figure. Nothing is
written: no catalog row, no relation; it runs with the caller's rights, like a build.
"""
from __future__ import annotations

import numpy as np

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.core.metrics import release_metrics
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.risk import class_figures
from plpy_anon.db import extschema, guards
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.methods.mondrian_family import (
    core_models,
    load_release_rows,
    sensitive_for_models,
)
from plpy_anon.db.methods.registry import REGISTRY
from plpy_anon.db.sqltext import progress, run
from plpy_anon.parameters import K

#: at most this many k in one sweep (each is a partitioning of the whole table)
MAX_KS = 50


def check_ks(k) -> list[int]:
    if k is None or len(k) == 0 or any(v is None for v in k):
        raise InvalidParameter("k must list the values to try, without NULL",
                               hint="Pass k => ARRAY[2, 5, 10, 20, 50].")
    ks = sorted({K.check(v) for v in k})        # each k as anon.mondrian_view declares it
    if len(ks) > MAX_KS:
        raise InvalidParameter(f"k lists {len(ks)} values, more than {MAX_KS}",
                               hint="Each k partitions the whole table: sweep fewer values at a time.")
    return ks


@sql_entry
def sweep(plpy, source, k, quasi_identifiers=None, sensitive=None, identifiers=None, l=None,
          risk_threshold=0.2) -> list[dict]:
    ks = check_ks(k)
    method = REGISTRY["mondrian"]
    tbl = guards.table(plpy, source)
    values = {p.name: p.python_default for p in method.surface.parameters}
    values.update(method.validate(k=ks[0], l=l, quasi_identifiers=quasi_identifiers,
                                  sensitive=sensitive, identifiers=identifiers))
    # nothing is published: no one to follow from version to version
    stored = method.resolve(plpy, tbl, method.spec_of(values)).parameters
    spec = method.spec_of({**stored, "refresh_mode": "fresh"})
    name = extschema.user(run(plpy, "SELECT $1::pg_catalog.regclass::text AS n", ["oid"],
                              [tbl.oid])[0]["n"])
    rows = load_release_rows(plpy, {"source": name}, spec, with_target=False)
    progress(plpy, f"read {rows.data.n_rows:,} rows of {name}")
    sensitive_codes, ordered, names = sensitive_for_models(rows, spec)
    out = []
    for value in ks:
        if value > rows.data.n_rows:
            out.append({"target_k": value, "classes": None, "smallest_class": None, "ncp_percent": None,
                        "c_dm": None, "c_avg": None, "prosecutor_risk_max": None,
                        "prosecutor_risk_avg": None, "prosecutor_records_at_risk": None,
                        "note": f"more than the table's {rows.data.n_rows} rows"})
            continue
        model = Mondrian(k=value, l=rows.l, **core_models(spec)).fit(
            rows.encoded, sensitive_codes, sensitive_ordered=ordered, sensitive_names=names)
        metrics = release_metrics(rows.encoded, model.labels_, value)
        sizes, classes = np.unique(np.bincount(model.labels_), return_counts=True)
        risk = class_figures(sizes, classes, risk_threshold=risk_threshold)
        out.append({"target_k": value, "classes": metrics["n_classes"], "smallest_class": risk["smallest_class"],
                    "ncp_percent": float(metrics["ncp_percent"]), "c_dm": int(metrics["c_dm"]),
                    "c_avg": float(metrics["c_avg"]), "prosecutor_risk_max": risk["prosecutor_risk_max"],
                    "prosecutor_risk_avg": risk["prosecutor_risk_avg"],
                    "prosecutor_records_at_risk": risk["prosecutor_records_at_risk"], "note": None})
        progress(plpy, f"k = {value}: {metrics['n_classes']:,} classes")
    return out
