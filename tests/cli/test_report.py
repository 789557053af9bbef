"""plpy-anon report: one self-contained HTML page with the release's guarantees as checked, source
and release risk, class sizes, information loss and utility/risk against k; opened in a real
browser (headless Chromium) and looked at."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest
from click.testing import CliRunner
from psycopg import sql

from plpy_anon.cli import EXIT_FILE, main
from tests.contract.methods import METHODS, Context, create_table
from tests.helpers import distinct_sensitive_per_class, release_schema_of

TABLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, zip text, sex text, dx text);
INSERT INTO people SELECT g, 18 + (g * 7919) % 70, 'z' || (g * 31) % 40, CASE WHEN g % 3 = 0 THEN 'F' ELSE 'M' END,
       'd' || g % 5 FROM generate_series(1, 400) g;
SELECT anon.set_column_role('people', 'id', 'identifier');
"""


@pytest.fixture
def report(pg_server, db, schema, tmp_path):
    db.execute(TABLE)
    rel = db.execute("SELECT anon.mondrian_view('people', k => 5, l => 2, quasi_identifiers => ARRAY['age', 'zip', 'sex'], "
                     "sensitive => ARRAY['dx'], release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["-d", conninfo, "--quiet", "--format", "json", "report", rel, "-o", str(out),
                                       "--population", "4000"])
    assert result.exit_code == 0, result.output
    smallest = db.execute(f"SELECT min(n) FROM (SELECT count(*) n FROM {rel} GROUP BY age, zip, sex) c").fetchone()[0]
    return rel, out, out.read_text(), smallest


def test_the_report_shows_what_was_promised_and_found_from_the_database(report):
    _rel, _out, page, smallest = report
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)          # self-contained
    assert page.count("<svg") == 4                           # risk, class sizes, information loss, k sweep
    assert "NOT kept" not in page and page.count(">kept<") == 3       # k, rows, l of dx
    guarantees = page.split("Guarantees")[1].split("</table>")[0]
    assert re.search(rf"every class has at least k rows</td><td class=\"num\">5</td><td class=\"num\">{smallest}<",
                     guarantees), guarantees
    risk = page.split("Re-identification risk: source and release")[1].split("</table>")[0]
    assert "journalist risk max" in risk and "marketer risk" in risk          # --population given
    k_rows = re.findall(r"<tr><td class=\"num\">(\d+)</td>", page.split("Choosing k")[1])
    assert [int(k) for k in k_rows] == [2, 3, 5, 10, 20, 50, 100]
    assert "@media print" in page


def test_the_report_renders_in_a_real_browser(report, tmp_path):
    _rel, out, _page, _smallest = report
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "Chromium is missing: make setup installs it (docker/setup-debian.sh --dev)"
    shot = tmp_path / "report.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1000,4200", out.as_uri()],
                   check=True, capture_output=True, timeout=120)
    import matplotlib.image
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[0] == 4200 and pixels.shape[1] == 1000
    # the charts were drawn: the histogram's blue (#3b5b92) and the release's green (#17753a) bars
    for colour in ((0x3b, 0x5b, 0x92), (0x17, 0x75, 0x3a)):
        target = np.array(colour) / 255
        assert (np.abs(pixels - target).max(axis=2) < 0.02).sum() > 500, colour


def test_the_report_judges_what_it_finds_now_not_what_the_catalog_says(pg_server, db, schema, tmp_path):
    """The release's owner can write anon.releases.verification: the verdicts come from the
    released rows counted for the report (found by review: a forged smallest class showed as kept)."""
    db.execute(TABLE)
    rel = db.execute("SELECT anon.mondrian_view('people', k => 5, quasi_identifiers => ARRAY['age', 'zip', 'sex'], "
                     "sensitive => ARRAY['dx'], release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    real = db.execute(f"SELECT min(n) FROM (SELECT count(*) n FROM {rel} GROUP BY age, zip, sex) c").fetchone()[0]
    db.execute("UPDATE anon.releases SET verification = verification || '{\"smallest_class\": 4}', achieved_k = 4 "
               "WHERE format('%%I.%%I', release_schema, release_name) = %s", (rel,))
    conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
    out = tmp_path / "forged.html"
    result = CliRunner().invoke(main, ["-d", conninfo, "--quiet", "report", rel, "-o", str(out)])
    assert result.exit_code == 0, result.output
    row = out.read_text().split("every class has at least k rows</td>")[1].split("</tr>")[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[:3] == ["5", str(real), "4"] and "NOT kept" not in cells[3]       # asked, now, recorded
    # the class sizes come from a guarded server function, equal to the released rows' own
    sizes = db.execute("SELECT class_size, classes FROM anon.class_sizes(%s) ORDER BY 1", (rel,)).fetchall()
    assert sizes == db.execute(f"SELECT n, count(*) FROM (SELECT count(*) n FROM {rel} GROUP BY age, zip, sex) c "
                               "GROUP BY n ORDER BY n").fetchall()


@pytest.mark.parametrize("verification,metrics", [
    ('{"l_by_column": [1]}',
     '{"ncp_per_attribute": {"age": "x", "zip": [1]}, "ncp_percent": {"a": 1}}'),
    ('[1]', '"x"'),
], ids=["parts", "wholes"])
def test_the_report_of_a_release_whose_owner_wrote_odd_figures_judges_it_from_its_rows(
        pg_server, db, schema, tmp_path, verification, metrics):
    """Figures in shapes no build writes (the release's owner may write its catalog row): the
    report ended in plpy-anon's internal error (a list or text where a build writes an object);
    it shows nothing of them and judges the release from what it finds now (a review)."""
    db.execute(TABLE)
    rel = db.execute("SELECT anon.mondrian_view('people', k => 5, l => 2, quasi_identifiers => "
                     "ARRAY['age', 'zip', 'sex'], sensitive => ARRAY['dx'], release_schema => %s)",
                     (release_schema_of(schema),)).fetchone()[0]
    db.execute("UPDATE anon.releases SET verification = %s::jsonb, metrics = %s::jsonb "
               "WHERE format('%%I.%%I', release_schema, release_name) = %s", (verification, metrics, rel))
    conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
    out = tmp_path / "odd.html"
    result = CliRunner().invoke(main, ["-d", conninfo, "--quiet", "report", rel, "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    smallest = db.execute(f"SELECT min(n) FROM (SELECT count(*) n FROM {rel} GROUP BY age, zip, sex) c").fetchone()[0]
    fewest = min(distinct_sensitive_per_class(db, rel, ["age", "zip", "sex"], "dx"))
    for promise, found in (("every class has at least k rows", smallest),
                           ("l-diversity of dx: distinct values per class", fewest)):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", page.split(f"{promise}</td>")[1].split("</tr>")[0])
        assert cells[1:3] == [str(found), "—"], cells          # found now; the odd record not shown
    assert "Information loss per attribute" not in page


def test_a_column_name_with_dollars_is_text_in_the_charts(pg_server, db, schema, tmp_path):
    db.execute('CREATE TABLE dollars (id int PRIMARY KEY, "a$\\nope{$" int, zip text)')
    db.execute("INSERT INTO dollars SELECT g, g % 30, 'z' || g % 4 FROM generate_series(1, 200) g")
    db.execute("SELECT anon.set_column_role('dollars', 'id', 'identifier')")
    rel = db.execute("SELECT anon.mondrian_view('dollars', k => 5, release_schema => %s)",
                     (release_schema_of(schema),)).fetchone()[0]
    conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
    result = CliRunner().invoke(main, ["-d", conninfo, "--quiet", "report", rel, "-o", str(tmp_path / "d.html")])
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------------------- what an attacker learns

class Tables(HTMLParser):
    """The page's tables by id: each row as (its class attribute, its cells' text)."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[tuple[str, list[str]]]] = {}
        self._table = self._row = self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id", ""), [])
        elif tag == "tr" and self._table is not None:
            self._row = (attrs.get("class") or "", [])
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row[1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def tables_of(page: str) -> dict:
    parser = Tables()
    parser.feed(page)
    return parser.tables


ADULT_QIS = ["age", "workclass", "education_num", "marital_status", "occupation", "race", "sex",
             "native_country"]


@pytest.fixture
def adult_k10(pg_server, db, schema, tmp_path):
    """A k-only (k = 10, no l) release of 3,000 rows of UCI Adult, and its report (a rule counts
    from certainty: --threshold rule=1)."""
    from tests.bench.bench_risk import ADULT_TYPES
    from tests.bench.common import adult, copy_frame
    copy_frame(db, "adult", adult()[list(ADULT_TYPES)].sample(3000, random_state=46), ADULT_TYPES)
    rel = db.execute("SELECT anon.mondrian_view('adult', k => 10, quasi_identifiers => %s, sensitive => '{income}', "
                     "release_schema => %s)", (ADULT_QIS, release_schema_of(schema))).fetchone()[0]
    conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
    out = tmp_path / "adult.html"
    result = CliRunner().invoke(main, ["-d", conninfo, "--quiet", "--format", "json", "report", rel, "-o", str(out),
                                       "--threshold", "rule=1"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["passed"] is False
    return rel, out, out.read_text()


def test_a_k_only_release_shows_l_1_and_the_classes_that_give_income_away(adult_k10, db):
    rel, _out, page = adult_k10
    tables = tables_of(page)
    checks = {(cells[0], cells[1]): (css, cells) for css, cells in tables["checks"][1:]}
    css, cells = checks[("distinct l", "income")]
    assert cells[2] == "1" and css == "failed" and "FAIL" in cells[4]
    assert min(distinct_sensitive_per_class(db, rel, ADULT_QIS, "income")) == 1      # the rows agree
    assert checks[("k: smallest class", "")][0] == "passed"
    assert checks[("entropy l", "income")][1][2] == "1" and checks[("entropy l", "income")][0] == "failed"
    rule = checks[("strongest rule: quasi-identifiers -> value", "income")][1]
    assert rule[2] == "1" and rule[3] == "below 1 (given)"                        # --threshold rule=1
    assert checks[("distinct l", "income")][1][3] == "at least 2 (default)"        # no l asked
    assert checks[("journalist risk (highest)", "")][0] == "unchecked"             # no --population: said so
    # the classes whose every row is >50K, counted from the released rows here, are the ones shown red
    classes, people = db.execute(
        sql.SQL("SELECT count(*), sum(n) FROM (SELECT count(*) n, bool_and(income = '>50K') high FROM {} "
                "GROUP BY {}) c WHERE high").format(sql.SQL(rel), sql.SQL(", ").join(map(sql.Identifier, ADULT_QIS)))
    ).fetchone()
    assert classes > 0
    disclosed = {cells[1]: (css, cells) for css, cells in tables["disclosed"][1:]}
    css, cells = disclosed[">50K"]
    assert css == "disclosed" and cells[2] == f"{classes:,}" and cells[3] == f"{people:,}" == cells[4]
    assert any(c[2] == ">50K" and css == "disclosed" for css, c in tables["rules"][1:])
    assert 'class="verdict bad"' in page and "learns their income with certainty" in page
    total = db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(rel))).fetchone()[0]
    assert f"of {total:,} people" in page
    # parameters as a table, a glossary of the terms
    parameters = {cells[0]: cells[1] for _css, cells in tables["parameters"][1:]}
    assert parameters["k"] == "10" and parameters["quasi_identifiers"] == ", ".join(ADULT_QIS)
    for term in ("Distinct l (l-diversity)", "t (t-closeness)", "Journalist risk", "Marketer risk"):
        assert f"<dt>{term}</dt>" in page


def test_the_failed_checks_and_disclosed_classes_render_red_in_a_browser(adult_k10, tmp_path):
    _rel, out, _page = adult_k10
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "Chromium is missing: make setup installs it (docker/setup-debian.sh --dev)"
    shot = tmp_path / "adult.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1000,1400", out.as_uri()],
                   check=True, capture_output=True, timeout=120)
    import matplotlib.image
    pixels = matplotlib.image.imread(shot)[..., :3]

    def near(colour):
        return (np.abs(pixels - np.array(colour) / 255).max(axis=2) < 0.03).sum()
    # above any chart: the verdict and the failed and disclosing rows on their light red
    # (#fdecea), their figures and FAIL in red (#b42318)
    assert near((0xfd, 0xec, 0xea)) > 40_000
    assert near((0xb4, 0x23, 0x18)) > 1_000


@pytest.mark.parametrize("method", [m for m in METHODS if m.name != "random_groups_view"], ids=lambda m: m.name)
def test_every_methods_release_is_reportable(method, pg_server, db, schema, tmp_path):
    source = create_table(db, f"{schema}.people")
    ctx, role = None, None
    if method.name == "trust_view":
        role, requester, purpose = f"{schema}_req"[:60], f"rq{len(schema)}", f"pp{len(schema)}"
        db.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        db.execute("SELECT anon.add_requester(%s, role => %s)", (requester, role))
        db.execute("SELECT anon.define_purpose(%s, priorities => '{\"age\": 1, \"job\": 0.2}'::jsonb)", (purpose,))
        ctx = Context(requester=requester, purpose=purpose)
    try:
        rel = method.create(db, ctx, source, 5, 2 if method.l_arg else None,
                            release_schema=release_schema_of(schema))
        conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
        out = tmp_path / "r.html"
        result = CliRunner().invoke(main, ["-d", conninfo, "--quiet", "--format", "json", "report", rel,
                                           "-o", str(out)])
        assert result.exit_code == 0, result.output
        page = out.read_text()
        checks = {cells[0]: cells for _css, cells in tables_of(page)["checks"][1:]}
        passed = json.loads(result.stdout)[0]["passed"]
        assert re.search(r'class="verdict (\w+)"', page).group(1) == {True: "ok", False: "bad", None: "unchecked"}[passed]
        if method.values == "substituted":        # no classes: nothing to judge, and it says so
            assert passed is None and "Nothing here could be checked" in page
        assert {"k: smallest class", "strongest rule: quasi-identifiers -> value", "prosecutor risk (highest)",
                "journalist risk (highest)", "marketer risk"} <= set(checks)
        if method.k_arg:            # k found from the released rows, as the server counts it
            assert int(checks["k: smallest class"][2].replace(",", "")) >= 5
    finally:
        if role:
            db.execute("DELETE FROM anon.purposes WHERE purpose_name = %s", (purpose,))
            for (rel_name,) in db.execute("SELECT format('%%I.%%I', release_schema, release_name) FROM anon.releases "
                                          "WHERE release_schema = %s", (release_schema_of(schema),)).fetchall():
                db.execute("SELECT anon.drop_release(%s, if_exists => true)", (rel_name,))
            db.execute("DELETE FROM anon.requesters WHERE role_name = %s", (role,))
            db.execute(sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(sql.Identifier(role), sql.Identifier(role)))


def test_names_and_values_from_the_database_are_text_on_the_page(pg_server, db, schema, tmp_path):
    db.execute('CREATE TABLE marked (id int PRIMARY KEY, "<i>age</i>" int, dx text)')
    db.execute("INSERT INTO marked SELECT g, g % 4, CASE WHEN g % 4 = 0 THEN '<script>alert(1)</script>' "
               "ELSE 'flu' END FROM generate_series(1, 200) g")
    db.execute("SELECT anon.set_column_role('marked', 'id', 'identifier')")
    rel = db.execute("SELECT anon.mondrian_view('marked', k => 5, sensitive => '{dx}', release_schema => %s)",
                     (release_schema_of(schema),)).fetchone()[0]
    conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
    out = tmp_path / "marked.html"
    result = CliRunner().invoke(main, ["-d", conninfo, "--quiet", "report", rel, "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "<script" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;i&gt;age&lt;/i&gt;" in page


def test_a_report_into_a_missing_directory_is_a_clear_error(pg_server, tmp_path):
    conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items())
    for command in (["report", "x"], ["export", "x"]):
        target = tmp_path / "no" / "such" / "file"
        result = CliRunner().invoke(main, ["-d", conninfo, *command, "-o", str(target)])
        assert result.exit_code == EXIT_FILE == 73, result.output
        assert result.stderr.strip() == (f"plpy-anon: error: cannot write {target}: directory {target.parent} "
                                         "does not exist (hint: Create it first (mkdir -p), or give another -o.)")
        assert "Traceback" not in result.output


def test_an_unknown_threshold_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["report", "x", "-o", str(tmp_path / "r.html"), "--threshold", "kk=3"])
    assert result.exit_code == 2 and "unknown threshold 'kk'" in result.stderr
    result = CliRunner().invoke(main, ["report", "x", "-o", str(tmp_path / "r.html"), "--threshold", "k=five"])
    assert result.exit_code == 2 and "NAME=NUMBER" in result.stderr
