"""Issue 15's worked example (docs/risk.md): anon.risk_report of UCI Adult (30,162 complete rows
of adult.data; 8 quasi-identifiers, income sensitive) and of a k = 10 anon.mondrian_view release,
with population = 45,222 (the complete rows of adult.data + adult.test, of which adult.data is a
sample). ``python -m tests.bench risk`` prints both reports as Markdown and writes
bench-results/risk.md; tests/db/test_risk_report.py checks every figure against pandas."""
from __future__ import annotations

import time

from tests.bench.common import adult, copy_frame, extension_db, results_dir

ADULT_QIS = ["age", "workclass", "education_num", "marital_status", "occupation", "race", "sex",
             "native_country"]
ADULT_TYPES = {"age": "int", "workclass": "text", "education_num": "int", "marital_status": "text",
               "occupation": "text", "race": "text", "sex": "text", "native_country": "text",
               "income": "text"}
POPULATION = 45_222


def load_adult(conn, table: str = "adult") -> None:
    """The 8 quasi-identifiers and income of Adult's complete rows, as table ``table``."""
    copy_frame(conn, table, adult()[list(ADULT_TYPES)], ADULT_TYPES)


def risk_rows(conn, relation: str, **named) -> list[tuple]:
    args = ", ".join(f"{k} => %({k})s" for k in named)
    return conn.execute(f"SELECT * FROM anon.risk_report(%(relation)s{', ' if args else ''}{args})",
                        {"relation": relation, **named}).fetchall()


def markdown(rows) -> str:
    out = ["| measure | column_name | value | detail |", "|---|---|---|---|"]
    for measure, column, value, detail in rows:
        shown = "NULL" if value is None else (f"{value:.6g}" if value != int(value) else f"{int(value)}")
        out.append(f"| {measure} | {column or ''} | {shown} | {detail or ''} |")
    return "\n".join(out)


def main() -> None:
    with extension_db() as conn:
        load_adult(conn)
        t0 = time.perf_counter()
        source = risk_rows(conn, "adult", quasi_identifiers=ADULT_QIS, sensitive=["income"],
                           population=POPULATION)
        t_source = time.perf_counter() - t0
        release = conn.execute(
            "SELECT anon.mondrian_view('adult', k => 10, quasi_identifiers => %s, "
            "sensitive => ARRAY['income'], release_name => 'adult_k10')", (ADULT_QIS,)).fetchone()[0]
        t0 = time.perf_counter()
        released = risk_rows(conn, release, population=POPULATION)
        t_release = time.perf_counter() - t0
    text = (f"## Source: SELECT * FROM anon.risk_report('adult', quasi_identifiers => ARRAY{ADULT_QIS}, "
            f"sensitive => ARRAY['income'], population => {POPULATION}) -- {t_source:.2f} s\n\n"
            f"{markdown(source)}\n\n"
            f"## Release: SELECT * FROM anon.risk_report('{release}', population => {POPULATION}) "
            f"-- {t_release:.2f} s\n\n{markdown(released)}\n")
    print(text)
    (results_dir() / "risk.md").write_text(text)
