"""``plpy-anon report RELEASE -o report.html``: one self-contained HTML page a privacy officer can
read, print and file. What it shows, each from the database, never recomputed here:

* the release: method, source, parameters, rows, when built;
* its guarantees and how they were checked (``anon.releases.verification``: the check ran on the
  released rows, as which role, when);
* re-identification risk of the source beside the release's (``anon.risk_report`` of each:
  prosecutor, and with a population journalist and marketer);
* the class-size histogram (a ``GROUP BY`` of the released quasi-identifiers);
* information loss per attribute (NCP, from the release's metrics);
* utility and risk against k, from ``anon.sweep`` (Mondrian-family releases): what other k would
  have given, computed without publishing anything.

Charts are drawn by matplotlib (the ``[report]`` extra) as inline SVG; the page has a print
stylesheet (A4, no background, charts kept whole).
"""
from __future__ import annotations

import datetime
import html
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from plpy_anon.client import errors

SWEEP_KS = (2, 3, 5, 10, 20, 50, 100)
SWEPT_METHODS = ("mondrian", "prioritized_mondrian")
RISK_MEASURES = ("smallest_class", "prosecutor_risk_max", "prosecutor_risk_avg", "prosecutor_records_at_risk",
                 "journalist_risk_max", "journalist_records_at_risk", "marketer_risk")

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; color: #1d2330; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d5d9e0; }
.sub { color: #5a6270; margin-top: 0; }
table { border-collapse: collapse; margin: .6rem 0; } th, td { padding: .25rem .7rem; border-bottom: 1px solid #e4e7ec; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #17753a; font-weight: 600; } .bad { color: #b42318; font-weight: 600; }
.note { color: #5a6270; font-size: .9rem; }
figure { margin: .8rem 0; } figure svg { max-width: 100%; height: auto; }
@media print {
  @page { size: A4; margin: 15mm; }
  body { margin: 0; max-width: none; font-size: 11pt; }
  h2 { break-after: avoid; } figure, table { break-inside: avoid; }
}
"""


def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _num(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else html.escape(str(value))


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f'<td class="num">{_num(v)}</td>' if isinstance(v, (int, float)) or v is None
        else f"<td>{v if isinstance(v, Markup) else html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Markup(str):
    """Text already escaped (a verdict's span)."""


def _verdict(ok: bool | None) -> Markup:
    if ok is None:
        return Markup('<span class="note">not counted now</span>')
    return Markup('<span class="ok">kept</span>' if ok else '<span class="bad">NOT kept</span>')


def gather(anon, release: str, population: int | None = None) -> dict:
    """Everything the page shows, read from the database (see the module docstring)."""
    row = anon.release(release)
    qualified = anon.release_name(release)
    params = row["parameters"] or {}
    qis, sensitive = params.get("quasi_identifiers") or [], params.get("sensitive") or []
    facts = {"release": qualified, "row": row, "params": params, "qis": qis, "sensitive": sensitive,
             "population": population, "extension": anon.extension_version(), "notes": []}
    try:
        facts["release_risk"] = _risk(anon, qualified, qis, sensitive, population)
    except errors.PermissionDenied as error:     # another role's release: its owner reads it
        facts["release_risk"] = {}
        facts["notes"].append(f"figures found now not shown: {error.message}")
    try:
        facts["source_risk"] = _risk(anon, str(row["source"]), qis, sensitive, population)
    except errors.ServerError as error:     # e.g. a custodian who may not read another's source
        facts["source_risk"] = None
        facts["notes"].append(f"source risk not shown: {error.message}")
    # through a guarded server function: a query of the release from here would plan whatever
    # index its owner added since the guarded calls above, with the reader's rights
    facts["histogram"] = []
    if qis and facts["release_risk"]:
        facts["histogram"] = [(r["class_size"], r["classes"]) for r in
                              anon.call("class_sizes", qualified, quasi_identifiers=qis or None)]
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
    return facts


def _risk(anon, relation: str, qis, sensitive, population) -> dict:
    rows = anon.call("risk_report", relation, quasi_identifiers=qis or None,
                     sensitive=sensitive or None, population=population)
    return {(r["measure"], r["column_name"]): r["value"] for r in rows}


def render(facts: dict) -> str:
    # names come from the release's owner: "$" in a column name is text, not math to typeset
    with plt.rc_context({"text.parse_math": False}):
        return _render(facts)


def _render(facts: dict) -> str:
    row, params = facts["row"], facts["params"]
    verification = row.get("verification") or {}
    title = f"Anonymized release {facts['release']}"
    parts = [f"<h1>{html.escape(title)}</h1>",
             (f'<p class="sub">{html.escape(row["method"])} release of {html.escape(str(row["source"]))}; '
             f"{_num(row['row_count'])} rows; built {html.escape(str(row.get('refreshed_at') or row.get('created_at')))}; "
             f"plpy_anon {html.escape(str(facts['extension']))}; report of "
             f"{datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}</p>")]

    # guarantees: found now in the released rows by anon.risk_report (guarded, the reader's
    # rights), beside what the build's check recorded in the catalog, which the release's owner
    # can write: the verdict is the one found now
    released = facts["release_risk"]
    promised = []
    if params.get("k") is not None:
        found = released.get(("smallest_class", None))
        promised.append(["k-anonymity: every class has at least k rows", params["k"],
                         None if found is None else int(found), verification.get("smallest_class"),
                         _verdict(None if found is None else found >= params["k"])])
    for column in facts["sensitive"]:
        if params.get("l") is None:
            break
        found = released.get(("distinct_l", column))
        promised.append([f"l-diversity of {column}: distinct values per class", params["l"],
                         None if found is None else int(found),
                         (verification.get("l_by_column") or {}).get(column),
                         _verdict(None if found is None else found >= params["l"])])
    rows_now = released.get(("rows", None))
    if verification.get("rows_expected") is not None:
        promised.append(["every source row released once (the build's count)", verification["rows_expected"],
                         None if rows_now is None else int(rows_now), verification.get("rows_released"),
                         _verdict(None if rows_now is None else int(rows_now) == verification["rows_expected"])])
    parts += ["<h2>Guarantees, checked from the released rows</h2>",
              _table(["promise", "asked", "found now", "recorded by the build", ""], promised)
              if promised else "<p>No guarantee recorded.</p>",
              (f'<p class="note">"Found now": counted by anon.risk_report over the released rows for this '
               f"report, with the reader's rights. \"Recorded by the build\": plpy_anon's check of the "
               f"released rows when the release was built, as role "
               f"{html.escape(str(verification.get('checked_as', '?')))} at "
               f"{html.escape(str(verification.get('checked_at', '?')))} (anon.releases.verification, "
               f"which the release's owner can write).</p>"),
              _table(["parameter", "value"], [[k, json.dumps(v)] for k, v in sorted(params.items())
                                               if v is not None and k in ("k", "l", "l_diversity", "c", "t", "split",
                                                                          "quasi_identifiers", "sensitive", "dropped")])]

    # risk: source beside release
    source = facts["source_risk"] or {}
    measures = [m for m in RISK_MEASURES if (m, None) in released]
    parts += ["<h2>Re-identification risk: source and release</h2>",
              _table(["measure", "source", "release"],
                     [[m.replace("_", " "), source.get((m, None)), released.get((m, None))] for m in measures])]
    if facts["population"] is None:
        parts.append('<p class="note">Journalist and marketer risk need the population the table is a sample of: '
                     "plpy-anon report --population N.</p>")
    shown = [m for m in ("prosecutor_risk_max", "prosecutor_risk_avg", "journalist_risk_max", "marketer_risk")
             if (m, None) in released]
    if shown and source:
        fig, ax = plt.subplots(figsize=(6.5, 2.8))
        x = range(len(shown))
        ax.bar([i - 0.2 for i in x], [source.get((m, None)) or 0 for m in shown], 0.4, label="source", color="#b42318")
        ax.bar([i + 0.2 for i in x], [released.get((m, None)) or 0 for m in shown], 0.4, label="release", color="#17753a")
        ax.set_xticks(list(x), [m.replace("_risk_", " risk\n").replace("_", " ") for m in shown])
        ax.set_ylabel("probability")
        ax.set_ylim(0, 1)
        ax.legend(frameon=False)
        ax.set_title("Re-identification risk")
        parts.append(f"<figure>{_svg(fig)}</figure>")

    # class sizes
    if facts["histogram"]:
        sizes, counts = zip(*facts["histogram"])
        fig, ax = plt.subplots(figsize=(6.5, 2.8))
        ax.bar([str(s) for s in sizes], counts, color="#3b5b92")
        ax.set_xlabel("rows in the class")
        ax.set_ylabel("classes")
        ax.set_title(f"Class sizes ({sum(counts):,} classes)")
        if len(sizes) > 25:
            ax.set_xticks(range(0, len(sizes), max(1, len(sizes) // 12)))
        parts += ["<h2>Equivalence classes</h2>", f"<figure>{_svg(fig)}</figure>",
                  (f'<p class="note">A class is the rows with the same released quasi-identifiers '
                  f"({html.escape(', '.join(facts['qis']))}); an attacker who knows them narrows a person down "
                  f"to a class, never below {min(sizes)} rows.</p>")]

    # information loss
    ncp = (row.get("metrics") or {}).get("ncp_per_attribute") or {}
    if ncp:
        fig, ax = plt.subplots(figsize=(6.5, 0.5 + 0.35 * len(ncp)))
        names = list(ncp)
        ax.barh(names, [float(ncp[n]) for n in names], color="#8a5a00")
        ax.set_xlabel("NCP % (0: exact values, 100: fully generalized)")
        ax.set_xlim(0, 100)
        ax.invert_yaxis()
        ax.set_title("Information loss per attribute")
        parts += ["<h2>Information loss</h2>", f"<figure>{_svg(fig)}</figure>",
                  _table(["measure", "value"], [["NCP % (all attributes)", (row.get("metrics") or {}).get("ncp_percent")],
                                                ["C_DM (discernibility)", (row.get("metrics") or {}).get("c_dm")],
                                                ["C_AVG", (row.get("metrics") or {}).get("c_avg")]])]

    # utility and risk against k
    if facts["sweep"]:
        sweep = [s for s in facts["sweep"] if s["classes"] is not None]
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
        parts += ["<h2>Choosing k</h2>", f"<figure>{_svg(fig)}</figure>",
                  _table(["k", "classes", "smallest class", "NCP %", "C_DM", "max prosecutor risk"],
                         [[s["target_k"], s["classes"], s["smallest_class"], s["ncp_percent"], s["c_dm"],
                           s["prosecutor_risk_max"]] for s in sweep])]
    for note in facts["notes"]:
        parts.append(f'<p class="note">{html.escape(note)}</p>')
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def write_report(anon, release: str, path: str | Path, *, population: int | None = None) -> dict:
    """Write the report of ``release`` to ``path``; returns what it shows in short."""
    facts = gather(anon, release, population)
    page = render(facts)
    Path(path).write_text(page, encoding="utf-8")
    return {"release": facts["release"], "file": str(path), "achieved_k": facts["row"]["achieved_k"],
            "charts": page.count("<svg")}
