"""``plpy-anon report RELEASE -o report.html``: one self-contained HTML page a privacy officer can
read, print and file, and a board can act on. What it shows, each from the database, never
recomputed here:

* a one-line verdict, then what an attacker learns from the release whatever it promised: k, l
  (distinct and entropy), t, the strongest rule from quasi-identifiers to a sensitive value, and
  prosecutor, journalist and marketer risk (``anon.risk_report`` and ``anon.breach_report`` of the
  release), each against a threshold;
* the classes that give a sensitive value away (a ``GROUP BY`` of the released rows, run by the
  server), for a release the reader owns;
* the release: method, source, parameters, rows, when built; its guarantees and how they were
  checked (``anon.releases.verification``);
* re-identification risk of the source beside the release's, the class-size histogram
  (``anon.class_sizes``), information loss per attribute (the release's metrics) and, for
  Mondrian-family releases, utility and risk against k (``anon.sweep``);
* a glossary of the terms.

The page is a Jinja2 template (``templates/report.html``, autoescaped: every name and value from
the database is text); charts are drawn by matplotlib (the ``[report]`` extra) as inline SVG; the
page has a print stylesheet (A4, no background, charts kept whole).
"""
from __future__ import annotations

import dataclasses
import datetime
import decimal
import io
import json
from pathlib import Path

import jinja2
import numpy as np
from markupsafe import Markup
from psycopg import sql

from plpy_anon.client import errors
from plpy_anon.client.report_thresholds import DEFAULT_THRESHOLDS, THRESHOLD_HELP  # noqa: F401 -- re-exported

SWEEP_KS = (2, 3, 5, 10, 20, 50, 100)
SWEPT_METHODS = ("mondrian", "prioritized_mondrian")
RISK_MEASURES = ("smallest_class", "prosecutor_risk_max", "prosecutor_risk_avg", "prosecutor_records_at_risk",
                 "journalist_risk_max", "journalist_records_at_risk", "marketer_risk")
#: classes listed per sensitive value under "what the release gives away" (the strongest first)
RULES_SHOWN = 10

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; color: #1d2330; max-width: 62rem; margin: 2rem auto; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d5d9e0; }
.sub { color: #5a6270; margin-top: 0; }
table { border-collapse: collapse; margin: .6rem 0; } th, td { padding: .25rem .7rem; border-bottom: 1px solid #e4e7ec; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.ok { color: #17753a; font-weight: 600; } .bad { color: #b42318; font-weight: 600; }
tr.failed td { background: #fdecea; } tr.failed td.num.found, tr.disclosed td { color: #b42318; font-weight: 600; }
.verdict { font-size: 1.15rem; padding: .7rem 1rem; border-radius: 4px; margin: 1rem 0; }
.verdict.bad { background: #fdecea; border-left: 6px solid #b42318; }
.verdict.ok { background: #e8f5ec; border-left: 6px solid #17753a; }
.verdict.unchecked { background: #f1f3f6; border-left: 6px solid #5a6270; }
.note { color: #5a6270; font-size: .9rem; } .unchecked { color: #5a6270; }
dl dt { font-weight: 600; margin-top: .5rem; } dl dd { margin-left: 1.2rem; }
figure { margin: .8rem 0; } figure svg { max-width: 100%; height: auto; }
@media print {
  @page { size: A4; margin: 15mm; }
  body { margin: 0; max-width: none; font-size: 11pt; }
  h2 { break-after: avoid; } figure, table, .verdict { break-inside: avoid; }
  tr.failed td, .verdict { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
"""


# ---------------------------------------------------------------------------- numbers

def number(value) -> str:
    """A figure as the page shows it: an integer exactly, with thousands separators (a count that
    arrives as a float8 is still a count); another number to 3 significant digits, never in
    exponent notation; None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, decimal.Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float) and abs(value) >= 1000:
        return f"{value:,.0f}"
    if isinstance(value, float):
        return np.format_float_positional(value, precision=3, unique=True, fractional=False, trim="-")
    return str(value)


def parameter_text(value) -> str:
    """A parameter's value in the parameters table: lists as comma-separated names, booleans as
    SQL and JSON spell them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(parameter_text(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number(value)
    return str(value)


# ---------------------------------------------------------------------------- the checks

@dataclasses.dataclass
class Check:
    """One figure against its threshold: ``passed`` None when the figure is not there (``note``
    says why)."""
    measure: str
    column: str | None
    found: object
    threshold: object
    origin: str            # "asked" (the release's parameter), "default" or "given" (--threshold)
    wanted: str            # "at least" / "at most" / "below"
    passed: bool | None
    note: str = ""


def _threshold(key: str, asked, given: dict) -> tuple[object, str]:
    if key in given:
        return given[key], "given"
    if asked is not None:
        return asked, "asked"
    return DEFAULT_THRESHOLDS[key], "default"


def _judge(found, threshold, wanted: str) -> bool | None:
    if found is None:
        return None
    return {"at least": found >= threshold, "at most": found <= threshold,
            "below": found < threshold}[wanted]


def checks(facts: dict, given: dict) -> list[Check]:
    """Every figure an attacker's gain is read from, against its threshold."""
    released, params = facts["release_risk"], facts["params"]
    out = []

    def add(measure, column, key, asked, wanted, figure, note_key=None):
        threshold, origin = _threshold(key, asked, given)
        found, detail = released.get((figure, column), (None, ""))
        if note_key is not None and found is None:
            detail = note_key
        out.append(Check(measure, column, found, threshold, origin, wanted,
                         _judge(found, threshold, wanted), "" if found is not None else detail))

    add("k: smallest class", None, "k", params.get("k"), "at least", "smallest_class")
    for column in facts["sensitive_reported"]:
        add("distinct l", column, "l", params.get("l"), "at least", "distinct_l")
        add("entropy l", column, "entropy_l",
            params.get("l") if params.get("l_diversity") == "entropy" else None, "at least", "entropy_l")
        add("t-closeness", column, "t", params.get("t"), "at most", "t_closeness")
    threshold, origin = _threshold("rule", params.get("max_rule_probability"), given)
    if facts["breach"]:
        for target, row in facts["breach"].items():
            out.append(Check("strongest rule: quasi-identifiers -> value", target, row["max_probability"],
                             threshold, origin, "below", _judge(row["max_probability"], threshold, "below")))
    else:
        out.append(Check("strongest rule: quasi-identifiers -> value", None, None, threshold, origin,
                         "below", None, facts.get("breach_note") or "no sensitive column"))
    add("prosecutor risk (highest)", None, "prosecutor", None, "at most", "prosecutor_risk_max")
    population_note = "not computed: give the population the table is a sample of (--population N)"
    add("journalist risk (highest)", None, "journalist", None, "at most", "journalist_risk_max",
        None if facts["population"] else population_note)
    add("marketer risk", None, "marketer", None, "at most", "marketer_risk",
        None if facts["population"] else population_note)
    return out


def verdict(facts: dict, judged: list[Check]) -> tuple[bool | None, str]:
    """(passed, one line a board can read); passed None when nothing could be checked."""
    failed = [c for c in judged if c.passed is False]
    unchecked = [c for c in judged if c.passed is None]
    rows = number(facts["row"]["row_count"])
    if failed:
        what = ", ".join(dict.fromkeys(
            c.measure.split(":")[0] + (f" of {c.column}" if c.column else "") for c in failed))
        line = f"Not safe to publish as it is: {len(failed)} of {len(judged)} checks fail ({what})."
        gives_away = [c for c in failed if c.measure.startswith(("distinct l", "strongest rule"))]
        if gives_away and facts["disclosed"]:
            column = gives_away[0].column
            found = facts["disclosed"].get(column, [])
            certain, likely = sum(d["certain"] for d in found), sum(d["rows"] for d in found)
            known = ", ".join(facts["qis"]) or "quasi-identifiers"
            if certain:
                line += (f" Anyone who knows a person's {known} learns their {column} with certainty "
                         f"for {number(certain)} of {rows} people.")
            elif likely:
                line += (f" Anyone who knows a person's {known} guesses their {column} with probability "
                         f"{number(gives_away[0].threshold)} or more for {number(likely)} of {rows} people.")
        return False, line
    if len(unchecked) == len(judged):
        why = next((c.note for c in judged if c.note), "")
        return None, (f"Nothing here could be checked ({why}): judge this {facts['row']['method']} "
                      "release by its method's own figures.")
    line = f"Meets every threshold checked ({len(judged) - len(unchecked)} of {len(judged)})."
    if unchecked:
        line += " Not checked: " + ", ".join(dict.fromkeys(c.measure for c in unchecked)) + "."
    return True, line


# ---------------------------------------------------------------------------- the figures

def gather(anon, release: str, population: int | None = None, thresholds: dict | None = None) -> dict:
    """Everything the page shows, read from the database (see the module docstring)."""
    row = anon.release(release)
    qualified = anon.release_name(release)
    params = row["parameters"] or {}
    qis, sensitive = params.get("quasi_identifiers") or [], params.get("sensitive") or []
    if isinstance(sensitive, str):          # fusion names one column
        sensitive = [sensitive]
    facts = {"release": qualified, "row": row, "params": params, "qis": qis, "sensitive": sensitive,
             "population": population, "extension": anon.extension_version(), "notes": [],
             "thresholds": dict(thresholds or {}), "disclosed": {}, "rules": [], "breach": {}}
    try:        # the release's own quasi-identifiers and sensitive columns, as its method reads them
        facts["release_risk"] = _risk(anon, qualified, None, None, population)
    except errors.PermissionDenied as error:     # another role's release: its owner reads it
        facts["release_risk"] = {}
        facts["notes"].append(f"figures found now not shown: {error.message}")
    facts["sensitive_reported"] = list(dict.fromkeys(
        column for (measure, column) in facts["release_risk"] if column is not None))
    try:
        facts["source_risk"] = _risk(anon, str(row["source"]), qis, sensitive, population)
    except errors.ServerError as error:     # e.g. a custodian who may not read another's source
        facts["source_risk"] = None
        facts["notes"].append(f"source risk not shown: {error.message}")
    given = facts["thresholds"]
    rule_threshold = _threshold("rule", params.get("max_rule_probability"), given)[0]
    try:
        breach = anon.call("breach_report", qualified, threshold=float(rule_threshold))
        kind = "break_merge" if any(b["release_kind"] == "break_merge" for b in breach) else "plain"
        facts["breach"] = {b["target"]: b for b in breach if b["release_kind"] == kind and b["known"] is None}
    except errors.ServerError as error:
        facts["breach_note"] = f"not computed: {error.message}"
    if facts["breach"] or facts["sensitive_reported"]:
        _disclosures(anon, facts, rule_threshold)
    # through a guarded server function: a query of the release from here would plan whatever
    # index its owner added since the guarded calls above, with the reader's rights
    facts["histogram"] = []
    if facts["release_risk"].get(("classes", None), (None,))[0] is not None:
        facts["histogram"] = [(r["class_size"], r["classes"]) for r in anon.call("class_sizes", qualified)]
    facts["sweep"] = []
    if row["method"] in SWEPT_METHODS and qis:
        ks = [k for k in SWEEP_KS if k <= (row["row_count"] or 0)]
        if int(params.get("k") or 0) not in ks and params.get("k"):
            ks = sorted(set(ks) | {int(params["k"])})
        try:
            facts["sweep"] = anon.call("sweep", str(row["source"]), ks, quasi_identifiers=qis,
                                       sensitive=sensitive or None, l=params.get("l"))
        except errors.ServerError as error:
            facts["notes"].append(f"k sweep not shown: {error.message}")
    else:
        facts["notes"].append(f"no k sweep: anon.sweep covers Mondrian releases, this is {row['method']}")
    facts["checks"] = checks(facts, given)
    facts["passed"], facts["verdict"] = verdict(facts, facts["checks"])
    return facts


def _risk(anon, relation: str, qis, sensitive, population) -> dict:
    rows = anon.call("risk_report", relation, quasi_identifiers=qis or None,
                     sensitive=sensitive or None, population=population)
    return {(r["measure"], r["column_name"]): (r["value"], r["detail"]) for r in rows}


def _disclosures(anon, facts: dict, threshold: float) -> None:
    """The classes whose most frequent sensitive value reaches ``threshold`` (the rules an
    attacker reads off the release), counted by the server over the released rows; only for a
    release the reader owns (as ``AnonClient.release_frame``: planning a read of another role's
    relation runs its indexes' code with the reader's rights)."""
    owner = anon.foreign_owner(facts["release"])
    if owner is not None:
        facts["notes"].append(f"classes that give a value away not listed: {facts['release']} belongs to "
                              f"{owner}, whose release {owner} reads in a session of its own")
        return
    schema = anon.query("SELECT (pg_catalog.parse_ident(%s))[1] AS s", facts["release"])[0]["s"]
    params, method = facts["params"], facts["row"]["method"]
    for column in facts["breach"] or facts["sensitive_reported"]:
        if method == "break_merge" and column in (params.get("sensitive_tables") or {}):
            # Break-Merge publishes (group, value, count) per sensitive column
            table = sql.Identifier(schema, params["sensitive_tables"][column])
            classes = sql.SQL("SELECT 'group ' OPERATOR(pg_catalog.||) gid::text AS class, value::text AS value, "
                              "count::bigint AS n, pg_catalog.sum(count) OVER (PARTITION BY gid) AS size "
                              "FROM {} WHERE value IS NOT NULL").format(table)
        else:
            columns = anon.relation_columns(facts["release"])
            qis = [q for q in facts["qis"] if q in columns]
            if not qis or column not in columns:
                continue
            key = sql.SQL(", ").join(map(sql.Identifier, qis))
            label = sql.SQL(" OPERATOR(pg_catalog.||) ' | ' OPERATOR(pg_catalog.||) ").join(
                sql.SQL("coalesce({}::text, 'NULL')").format(sql.Identifier(q)) for q in qis)
            classes = sql.SQL(
                "SELECT {label} AS class, {s}::text AS value, pg_catalog.count(*) AS n, "
                "pg_catalog.sum(pg_catalog.count(*)) OVER (PARTITION BY {key}) AS size "
                "FROM {rel} WHERE {s} IS NOT NULL GROUP BY {key}, {s}").format(
                    label=label, s=sql.Identifier(column), key=key, rel=sql.SQL(facts["release"]))
        # c: (class, value, rows with it, class rows); strong: the rules reaching the threshold
        strong = sql.SQL(
            "WITH c AS ({}), strong AS (SELECT class, value, n, size, n::float8 / size AS probability "
            "FROM c WHERE n >= %s * size) ").format(classes)
        # the strongest rules of each value (a rare value learned is news; a common one less)
        facts["rules"] += [dict(r, column=column) for r in anon.query(strong + sql.SQL(
            "SELECT class, value, n, size, probability FROM (SELECT *, pg_catalog.row_number() OVER "
            "(PARTITION BY value ORDER BY probability DESC, n DESC, class) AS rank FROM strong) r "
            "WHERE rank <= %s ORDER BY value, rank"), threshold, RULES_SHOWN)]
        facts["disclosed"][column] = anon.query(strong + sql.SQL(
            "SELECT s.value, pg_catalog.count(*) AS classes, pg_catalog.sum(s.size)::bigint AS rows, "
            "coalesce(pg_catalog.sum(s.size) FILTER (WHERE s.n = s.size), 0)::bigint AS certain, "
            "pg_catalog.min(s.probability) AS lowest, "
            "(SELECT pg_catalog.sum(n) FROM c WHERE c.value = s.value)::float8 "
            "  / (SELECT pg_catalog.sum(n) FROM c) AS share "
            "FROM strong s GROUP BY s.value ORDER BY rows DESC, s.value"), threshold)


# ---------------------------------------------------------------------------- charts

def _svg(fig) -> Markup:
    import matplotlib.pyplot as plt
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return Markup(text[text.index("<svg"):])       # matplotlib escapes the text it draws


def charts(facts: dict) -> dict:
    """The page's charts as inline SVG (matplotlib, the [report] extra, imported here: the
    command line imports this module for its thresholds)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # names come from the release's owner: "$" in a column name is text, not math to typeset
    with plt.rc_context({"text.parse_math": False}):
        return _charts(facts, plt)


def _charts(facts: dict, plt) -> dict:
    out = dict.fromkeys(("risk", "classes", "loss", "sweep"))
    released, source = facts["release_risk"], facts["source_risk"] or {}
    shown = [m for m in ("prosecutor_risk_max", "prosecutor_risk_avg", "journalist_risk_max", "marketer_risk")
             if released.get((m, None), (None,))[0] is not None]
    if shown and source:
        fig, ax = plt.subplots(figsize=(6.5, 2.8))
        x = range(len(shown))
        ax.bar([i - 0.2 for i in x], [source.get((m, None), (0,))[0] or 0 for m in shown], 0.4,
               label="source", color="#b42318")
        ax.bar([i + 0.2 for i in x], [released[(m, None)][0] or 0 for m in shown], 0.4,
               label="release", color="#17753a")
        ax.set_xticks(list(x), [m.replace("_risk_", " risk\n").replace("_", " ") for m in shown])
        ax.set_ylabel("probability")
        ax.set_ylim(0, 1)
        ax.legend(frameon=False)
        ax.set_title("Re-identification risk")
        out["risk"] = _svg(fig)
    if facts["histogram"]:
        sizes, counts = zip(*facts["histogram"])
        fig, ax = plt.subplots(figsize=(6.5, 2.8))
        ax.bar([str(s) for s in sizes], counts, color="#3b5b92")
        ax.set_xlabel("rows in the class")
        ax.set_ylabel("classes")
        ax.set_title(f"Class sizes ({sum(counts):,} classes)")
        if len(sizes) > 25:
            ax.set_xticks(range(0, len(sizes), max(1, len(sizes) // 12)))
        out["classes"] = _svg(fig)
    ncp = {name: value for name, value in recorded(recorded(facts["row"].get("metrics")).get(
        "ncp_per_attribute")).items() if isinstance(value, (int, float)) and not isinstance(value, bool)}
    if ncp:
        fig, ax = plt.subplots(figsize=(6.5, 0.5 + 0.35 * len(ncp)))
        names = list(ncp)
        ax.barh(names, [float(ncp[n]) for n in names], color="#8a5a00")
        ax.set_xlabel("NCP % (0: exact values, 100: fully generalized)")
        ax.set_xlim(0, 100)
        ax.invert_yaxis()
        ax.set_title("Information loss per attribute")
        out["loss"] = _svg(fig)
    sweep = [s for s in facts["sweep"] if s["classes"] is not None]
    if sweep:
        params = facts["params"]
        ks = [s["target_k"] for s in sweep]
        fig, ax = plt.subplots(figsize=(6.5, 3))
        ax.plot(ks, [s["ncp_percent"] for s in sweep], "o-", color="#8a5a00", label="NCP % (information loss)")
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("k")
        ax.set_ylabel("NCP %")
        other = ax.twinx()
        other.plot(ks, [s["prosecutor_risk_max"] for s in sweep], "s--", color="#b42318", label="max prosecutor risk")
        other.set_ylabel("max prosecutor risk")
        other.set_ylim(0, 0.55)
        if params.get("k") in ks:
            ax.axvline(params["k"], color="#1d2330", linewidth=0.8)
            ax.annotate(f" this release (k = {params['k']})", (params["k"], ax.get_ylim()[1] * 0.92), fontsize=8)
        handles = ax.get_legend_handles_labels()[0] + other.get_legend_handles_labels()[0]
        ax.legend(handles, [h.get_label() for h in handles], frameon=False, loc="center right", fontsize=8)
        ax.set_title("Utility and risk against k (anon.sweep: nothing published)")
        out["sweep"] = _svg(fig)
    return out


# ---------------------------------------------------------------------------- the page

ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("plpy_anon.client", "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
ENVIRONMENT.filters["number"] = number
ENVIRONMENT.filters["parameter"] = parameter_text

#: parameters that name the release's own relations: not choices anyone made
INTERNAL_PARAMETERS = {"storage", "objects", "qit", "merged", "sensitive_tables", "released"}


def recorded(value) -> dict:
    """What the catalog recorded at the build (anon.releases.verification, .metrics, their
    parts): a mapping as a build writes it, else nothing shown. The release's owner can write
    them in any shape; the page's verdicts come from what is found now."""
    return value if isinstance(value, dict) else {}


def render(facts: dict) -> str:
    row, params = facts["row"], facts["params"]
    verification = recorded(row.get("verification"))
    released = facts["release_risk"]
    promised = []
    if params.get("k") is not None:
        found = released.get(("smallest_class", None), (None,))[0]
        promised.append(("k-anonymity: every class has at least k rows", params["k"], found,
                         verification.get("smallest_class"), None if found is None else found >= params["k"]))
    for column in facts["sensitive"] if params.get("l") is not None else []:
        found = released.get(("distinct_l", column), (None,))[0]
        promised.append((f"l-diversity of {column}: distinct values per class", params["l"], found,
                         recorded(verification.get("l_by_column")).get(column),
                         None if found is None else found >= params["l"]))
    rows_now = released.get(("rows", None), (None,))[0]
    if verification.get("rows_expected") is not None:
        promised.append(("every source row released once (the build's count)", verification["rows_expected"],
                         rows_now, verification.get("rows_released"),
                         None if rows_now is None else int(rows_now) == verification["rows_expected"]))
    source = facts["source_risk"] or {}
    risk_rows = [(m.replace("_", " "), source.get((m, None), (None,))[0], released[(m, None)][0])
                 for m in RISK_MEASURES if (m, None) in released]
    metrics = recorded(row.get("metrics"))
    template = ENVIRONMENT.get_template("report.html")
    return template.render(
        title=f"Anonymized release {facts['release']}", facts=facts, row=row,
        built=row.get("refreshed_at") or row.get("created_at"),
        now=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        checks=facts["checks"], passed=facts["passed"], verdict=facts["verdict"],
        parameters=[(k, v) for k, v in sorted(params.items())
                    if v is not None and v != [] and k not in INTERNAL_PARAMETERS],
        promised=promised, verification=verification, risk_rows=risk_rows,
        loss=[("NCP % (all attributes)", metrics.get("ncp_percent")),
              ("C_DM (discernibility)", metrics.get("c_dm")), ("C_AVG", metrics.get("c_avg"))],
        sweep=[s for s in facts["sweep"] if s["classes"] is not None],
        charts=charts(facts), style=Markup(STYLE),
        smallest_class=min(s for s, _ in facts["histogram"]) if facts["histogram"] else None)


def write_report(anon, release: str, path: str | Path, *, population: int | None = None,
                 thresholds: dict | None = None) -> dict:
    """Write the report of ``release`` to ``path``; returns what it shows in short."""
    facts = gather(anon, release, population, thresholds)
    page = render(facts)
    Path(path).write_text(page, encoding="utf-8")
    return {"release": facts["release"], "file": str(path), "achieved_k": facts["row"]["achieved_k"],
            "passed": facts["passed"], "failed_checks": sum(c.passed is False for c in facts["checks"]),
            "charts": page.count("<svg")}
