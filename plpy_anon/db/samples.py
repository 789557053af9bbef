"""anon.load_sample: the tables the documentation's examples read, loaded into a schema of the
caller's choosing with the caller's rights (CREATE on that schema), in one statement: a sample
loads whole or not at all."""
from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from importlib import resources

from plpy_anon.core.errors import DuplicateObject, InvalidParameter
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.sqltext import ident, run

ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
                 "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
                 "hours_per_week", "native_country", "income"]


@dataclass(frozen=True)
class SampleTable:
    name: str
    columns: tuple[tuple[str, str], ...]     # (name, SQL type) in table order
    rows: callable                           # () -> list of rows of text (None = NULL)
    key: str | None = None                   # primary key column


def _data(path: str):
    return resources.files("plpy_anon").joinpath(path)


def _patients() -> list[list[str | None]]:
    reader = csv.reader(io.StringIO(_data("data/patients.csv").read_text()))
    next(reader)
    return [[cell if cell != "" else None for cell in row] for row in reader]


def _adult() -> list[list[str]]:
    """The complete rows of adult.data (no '?'), in the file's order: the 8 usual
    quasi-identifiers, income, then education."""
    wanted = [ADULT_COLUMNS.index(c) for c in ("age", "workclass", "education_num",
                                               "marital_status", "occupation", "race", "sex",
                                               "native_country", "income", "education")]
    with gzip.open(_data("data/samples/adult.data.gz").open("rb"), "rt") as handle:
        rows = [[cell.strip() for cell in row] for row in csv.reader(handle) if len(row) == 15]
    return [[row[i] for i in wanted] for row in rows if "?" not in row]


#: the enterprise sample's generator seed (docs/fusion.md's example reads this very table)
ENTERPRISE_SEED = 0


def _enterprise():
    from plpy_anon.core.synthetic import make_enterprise
    return make_enterprise(n_employees=1000, web_coverage=0.85, n_strangers=20,
                           random_state=ENTERPRISE_SEED)


def _frame_rows(frame) -> list[list[str | None]]:
    import pandas as pd
    return [[None if pd.isna(value) else str(value) for value in row]
            for row in frame.itertuples(index=False)]


def _salaries() -> list[list[str]]:
    """Per patient: age, sex, zip and an invented salary."""
    return [[age, sex, zip_code, str(20000 + (int(pid) * 7919) % 60000)]
            for pid, _, age, sex, zip_code, _, _ in _patients()]


SAMPLES = {
    "patients": [SampleTable("patients", (
        ("patient_id", "integer"), ("full_name", "text NOT NULL"), ("age", "integer"),
        ("sex", "text"), ("zip", "text"), ("admitted", "date"), ("diagnosis", "text")),
        _patients, key="patient_id")],
    "adult": [SampleTable("adult", (
        ("age", "integer"), ("workclass", "text"), ("education_num", "integer"),
        ("marital_status", "text"), ("occupation", "text"), ("race", "text"), ("sex", "text"),
        ("native_country", "text"), ("income", "text"), ("education", "text")), _adult)],
    "enterprise": [
        SampleTable("employees", (("name", "text"), ("perf_1", "integer"), ("perf_2", "integer"),
                                  ("perf_3", "integer"), ("salary", "numeric(10,2)")),
                    lambda: _frame_rows(_enterprise()[0]), key="name"),
        SampleTable("web_facts", (("name", "text"), ("title", "text"),
                                  ("holdings", "numeric(10,4)")),
                    lambda: _frame_rows(_enterprise()[1]))],
    "hr": [SampleTable("salaries", (("age", "integer"), ("sex", "text"), ("zip", "text"),
                                    ("salary", "integer")), _salaries)],
}


def _create(plpy, schema: str, table: SampleTable) -> int:
    qualified = ident(plpy, schema, table.name)
    columns = [f"{ident(plpy, name)} {sql_type}" for name, sql_type in table.columns]
    if table.key:
        columns.append(f"PRIMARY KEY ({ident(plpy, table.key)})")
    plpy.execute(f"CREATE TABLE {qualified} ({', '.join(columns)})")
    rows = table.rows()
    names = [ident(plpy, name) for name, _ in table.columns]
    # every value travels as text and is cast by PostgreSQL, as COPY would
    casts = ", ".join(f"u.c{i}::{sql_type.split()[0]}" for i, (_, sql_type)
                      in enumerate(table.columns))
    arrays = ", ".join(f"${i + 1}::text[]" for i in range(len(table.columns)))
    aliases = ", ".join(f"c{i}" for i in range(len(table.columns)))
    plan = plpy.prepare(f"INSERT INTO {qualified} ({', '.join(names)}) SELECT {casts} "
                        f"FROM unnest({arrays}) AS u({aliases})", ["text[]"] * len(names))
    plpy.execute(plan, [list(column) for column in zip(*rows)])
    return len(rows)


@sql_entry
def load_sample(plpy, sample, schema_name):
    if sample not in SAMPLES:
        raise InvalidParameter(f"unknown sample {sample!r}",
                               hint=f"Load one of: {', '.join(SAMPLES)}.")
    if not schema_name.strip():
        raise InvalidParameter("schema_name is empty",
                               hint="Name the schema to load into, e.g. schema_name => 'public'.")
    for table in SAMPLES[sample]:
        if run(plpy, "SELECT pg_catalog.to_regclass($1) IS NOT NULL AS taken", ["text"],
               [ident(plpy, schema_name, table.name)])[0]["taken"]:
            raise DuplicateObject(
                f'relation "{schema_name}.{table.name}" already exists',
                hint=f"Drop it, or load the sample into another schema: "
                     f"SELECT anon.load_sample('{sample}', schema_name => 'other_schema');")
    if run(plpy, "SELECT pg_catalog.to_regnamespace($1) IS NULL AS missing", ["text"],
           [ident(plpy, schema_name)])[0]["missing"]:
        plpy.execute(f"CREATE SCHEMA {ident(plpy, schema_name)}")
    return [(ident(plpy, schema_name, table.name), _create(plpy, schema_name, table))
            for table in SAMPLES[sample]]
