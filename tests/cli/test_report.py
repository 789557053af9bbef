"""plpy-anon report: one self-contained HTML page with the release's guarantees as checked, source
and release risk, class sizes, information loss and utility/risk against k; opened in a real
browser (headless Chromium) and looked at."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from plpy_anon.cli import main
from tests.helpers import release_schema_of

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


def test_a_column_name_with_dollars_is_text_in_the_charts(pg_server, db, schema, tmp_path):
    db.execute('CREATE TABLE dollars (id int PRIMARY KEY, "a$\\nope{$" int, zip text)')
    db.execute("INSERT INTO dollars SELECT g, g % 30, 'z' || g % 4 FROM generate_series(1, 200) g")
    db.execute("SELECT anon.set_column_role('dollars', 'id', 'identifier')")
    rel = db.execute("SELECT anon.mondrian_view('dollars', k => 5, release_schema => %s)",
                     (release_schema_of(schema),)).fetchone()[0]
    conninfo = " ".join(f"{k}={v}" for k, v in pg_server.items()) + f" options='-c search_path={schema},public'"
    result = CliRunner().invoke(main, ["-d", conninfo, "--quiet", "report", rel, "-o", str(tmp_path / "d.html")])
    assert result.exit_code == 0, result.output
