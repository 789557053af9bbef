"""The pure identifier detector: column names (English, French), value formats with their check
digits, distinct-value estimation, and what blocks a release versus what is only reported."""
from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import identifiers as ident
from plpy_anon.core.identifiers import ColumnSample, blocking, detect, name_kind

DATA = Path(__file__).resolve().parents[2] / "plpy_anon" / "data" / "patients.csv"


def kinds(col: ColumnSample) -> dict[str, ident.Finding]:
    return {f.kind: f for f in detect([col])}


# ---------------------------------------------------------------------------- names

@pytest.mark.parametrize("name, kind", [
    ("full_name", "name"), ("FullName", "name"), ("PatientLastName", "name"), ("name", "name"),
    ("first_name", "name"), ("surname", "name"), ("Firstname", "name"), ("lastname", "name"),
    ("Prénom", "name"), ("nom", "name"), ("nom_de_famille", "name"), ("nom_naissance", "name"),
    ("email", "email"), ("E-Mail", "email"), ("courriel", "email"), ("adresse_mail", "email"),
    ("phone_number", "phone"), ("telephone", "phone"), ("Téléphone", "phone"), ("tel", "phone"),
    ("ssn", "national_id"), ("social_security_number", "national_id"), ("nir", "national_id"),
    ("num_secu", "national_id"), ("numero_securite_sociale", "national_id"),
    ("CreditCard", "national_id"), ("iban", "national_id"), ("passport_no", "national_id"),
    ("employee_id", "identifier"), ("identifiant", "identifier"), ("mrn", "identifier"),
    ("street_address", "address"), ("adresse", "address"), ("ip_address", "network_id"),
    ("comments", "free_text"), ("commentaire", "free_text"),
    ("date_naissance", "birth_date"), ("birth", "birth_date"), ("dob", "birth_date"),
])
def test_identifying_column_names_are_recognised(name, kind):
    assert name_kind(name)[0] == kind


@pytest.mark.parametrize("name", [
    "product_name", "city_name", "nom_du_produit", "sex", "age", "country", "native_country",
    "diagnosis", "zip", "education_num", "marital_status", "fnlwgt", "hours_per_week",
    "workclass", "occupation", "salary", "cell_type", "hotel", "id", "admitted", "race",
])
def test_harmless_column_names_are_not(name):
    assert name_kind(name) is None


# ---------------------------------------------------------------------------- formats

def nir(body: str) -> str:
    number = int(body.upper().replace("2A", "19").replace("2B", "18"))
    return f"{body}{97 - number % 97:02d}"


def test_national_ids_need_a_valid_check():
    assert ident.is_ssn("123-45-6789") and not ident.is_ssn("000-45-6789")
    assert not ident.is_ssn("666-45-6789") and not ident.is_ssn("123-00-6789")
    good = nir("1850578006084")
    assert ident.is_nir(good) and ident.is_nir(nir("269052A006084"))
    assert not ident.is_nir(good[:-2] + f"{(int(good[-2:]) + 1) % 97:02d}")   # wrong key
    assert ident.is_iban("FR76 3000 6000 0112 3456 7890 189")
    assert ident.is_iban("GB82WEST12345698765432") and not ident.is_iban("GB82WEST12345698765433")
    assert ident.is_card("4111 1111 1111 1111") and ident.is_card("5500-0000-0000-0004")
    assert not ident.is_card("4111 1111 1111 1112") and not ident.is_card("0000000000000000")


@pytest.mark.parametrize("value", ["+33 6 12 34 56 78", "(555) 123-4567", "06.12.34.56.78",
                                   "0612345678", "+14155550123", "555-123-4567"])
def test_phone_numbers(value):
    assert ident.is_phone(value)


@pytest.mark.parametrize("value", ["2020-01-15", "12/03/2020", "123456789", "75001", "53908",
                                   "123-45-6789", "3.14159", "42"])
def test_not_phone_numbers(value):
    assert not ident.is_phone(value)


def test_person_name_shape():
    for v in ["Jean-Pierre Dupont", "Mary O'Neil", "J. R. Smith", "Ludwig van Beethoven",
              "Ronald McDonald", "Élodie Lefèvre"]:
        assert ident.is_person_name(v), v
    for v in ["United-States", "Never-married", "Exec-managerial", "alice", "Type 2 diabetes",
              "flu"]:
        assert not ident.is_person_name(v), v


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"\A[a-z][a-z0-9._]{0,15}[a-z0-9]@[a-z][a-z0-9-]{0,10}[a-z0-9]\.(com|fr|org|de)\Z"))
def test_generated_emails_are_emails(email):
    assert ident.is_email(email)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=9, max_size=9), st.sampled_from(["fr", "us", "intl"]))
def test_generated_phones_are_phones(digits, style):
    d = "".join(map(str, digits))
    if style == "fr":
        v = "0" + " ".join(d[i:i + 2] for i in range(0, 9, 2)).replace(" ", "", 0)
        v = "0" + d[0] + " " + " ".join(d[i:i + 2] for i in range(1, 9, 2))
    elif style == "us":
        v = f"({2 + digits[0] % 8}{d[1:3]}) {d[3:6]}-{d[6:9]}0"
    else:
        v = f"+33 {d[0]} {d[1:3]} {d[3:5]} {d[5:7]} {d[7:9]}"
    assert ident.is_phone(v), v


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=15, max_size=15))
def test_luhn_completed_cards_are_cards(digits):
    body = "4" + "".join(map(str, digits))
    check = next(c for c in "0123456789" if ident.luhn_ok(body + c))
    assert ident.is_card(body + check)


# ---------------------------------------------------------------------------- distinct values

def test_distinct_ratio_exact_and_estimated():
    ratio, d, n = ident.estimate_distinct_ratio(list(range(100)), None)
    assert (ratio, d, n) == (1.0, 100, 100)
    # an all-distinct sample of a big table: unique
    assert ident.estimate_distinct_ratio(list(range(1000)), 1_000_000)[0] > 0.95
    # 10,000 zip codes among 1,000,000 rows: far from unique although most sampled zips differ
    rng = random.Random(1)
    sample = [rng.randrange(10_000) for _ in range(1000)]
    assert len(set(sample)) / 1000 > 0.9
    assert ident.estimate_distinct_ratio(sample, 1_000_000)[0] < 0.05
    # NULLs are rows: a mostly-NULL column is not near-unique
    assert ident.estimate_distinct_ratio([None] * 90 + list(range(10)), None)[0] == 0.1


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(20, 2000), st.integers(0, 2**31))
def test_small_domain_categories_never_flagged(domain, n, seed):
    rng = random.Random(seed)
    labels = [f"cat-{i}" for i in range(domain)]
    values = tuple(rng.choice(labels) for _ in range(n))
    found = detect([ColumnSample("category", values=values, rows=n * 10)])
    assert not [f for f in found if f.kind == "near_unique"]
    assert not blocking(found)


# ---------------------------------------------------------------------------- verdicts

def test_text_findings_block_and_numbers_only_inform():
    n = 200
    names = tuple(f"{f} {l}" for f, l in zip(["Alice", "Bruno", "Chloé", "David"] * 50,
                                              [f"Mart{chr(97 + i % 26)}n{chr(97 + i // 26)}" for i in range(n)]))
    cols = [
        ColumnSample("person", values=names),                                   # shape only
        ColumnSample("contact", values=tuple(f"user{i}@example.org" for i in range(n))),
        ColumnSample("x1", values=tuple(f"06 12 34 {i // 100:02d} {i % 100:02d}" for i in range(n))),
        ColumnSample("x2", values=tuple(f"{100 + i:03d}-45-{1000 + i:04d}" for i in range(n))),
        ColumnSample("remarks_col", values=tuple(f"patient {i} reported pain after the second dose"
                                                 for i in range(n))),
        ColumnSample("code", values=tuple(f"K{i:05d}" for i in range(n))),       # near-unique text
        ColumnSample("salary", "int4", "N", tuple(str(30000 + i) for i in range(n))),
        ColumnSample("seen", "timestamptz", "D", tuple(f"2024-01-01 00:{i // 60:02d}:{i % 60:02d}"
                                                        for i in range(n))),
        ColumnSample("sex", values=tuple("MF"[i % 2] for i in range(n))),
        ColumnSample("diagnosis", values=tuple(["flu", "asthma", ("acute myocardial infarction of "
                                                "the anterior wall")][i % 3] for i in range(n))),
    ]
    found = detect(cols)
    got = {(f.column, f.kind): f for f in found}
    assert got[("person", "name")].blocks_release
    assert got[("contact", "email")].confidence == "high"
    assert got[("x1", "phone")].blocks_release
    assert got[("x2", "national_id")].blocks_release
    assert got[("remarks_col", "free_text")].blocks_release
    assert got[("code", "near_unique")].blocks_release
    for col in ("salary", "seen"):
        assert got[(col, "near_unique_number")].blocks_release is False
    assert set(blocking(found)) == {"person", "contact", "x1", "x2", "remarks_col", "code"}


def test_name_rule_blocks_whatever_the_values_and_type():
    f = kinds(ColumnSample("full_name", values=("a", "b", "a")))
    assert f["name"].blocks_release and "fullname" in f["name"].evidence
    assert kinds(ColumnSample("phone", "int8", "N", ("1", "2")))["phone"].blocks_release
    assert kinds(ColumnSample("email", values=()))["email"].blocks_release   # empty table
    assert "free_text" not in kinds(ColumnSample("note", "int4", "N", ("12", "15")))
    birth = kinds(ColumnSample("date_naissance", "date", "D", ("1980-01-01",)))["birth_date"]
    assert not birth.blocks_release


def test_bundled_patients_flag_only_the_identifying_columns():
    df = pd.read_csv(DATA, dtype=str)
    cols = [ColumnSample(c, values=tuple(df[c]), rows=len(df)) for c in df.columns
            if c not in ("patient_id", "age")]
    cols.append(ColumnSample("age", "int4", "N", tuple(df["age"]), len(df)))
    found = detect(cols)
    assert set(blocking(found)) == {"full_name"}
    full = next(f for f in found if f.column == "full_name")
    assert full.confidence == "high" and "personal-name shape" in full.evidence
    assert df["full_name"].nunique() < len(df)            # the issue: names are not unique
