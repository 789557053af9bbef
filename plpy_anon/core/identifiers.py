"""Which columns of a table look like they identify people (pure: no database import).

Used two ways: ``anon.detect_identifiers(table)`` reports every finding, and a release refuses a
table whose *undeclared* columns (those that would get their role by default) have a blocking
finding. Two kinds of evidence, in the spirit of PostgreSQL Anonymizer's ``anon.detect``:

* the column's **name** (English and French dictionaries: ``full_name``, ``prenom``, ``email``,
  ``telephone``, ``ssn``, ``num_secu``, ...), tokenized so ``PatientLastName``, ``"E-Mail"`` and
  ``nom_de_famille`` are recognised; a bare ``name``/``nom`` counts, ``product_name`` does not;
* a **sample of values**: the share of non-NULL sampled values matching a format (e-mail, phone,
  US SSN, French NIR/INSEE with its key, IBAN with mod-97, payment card with Luhn, UUID, IPv4,
  personal-name shape, free text), and the estimated share of distinct values over the table
  (Haas & Stokes' Duj1 estimator, the one PostgreSQL's ANALYZE uses, from the sample and the row
  count).

What blocks a release: any finding on a text column (names, e-mails, phones, national ids, free
text, near-unique text), and any column whose name says it identifies, whatever its type. What
does NOT block: near-unique numbers and dates (salary, ``fnlwgt``, timestamps) and birth dates --
legitimate quasi-identifiers that generalizing methods release as ranges; they are reported as
``medium``/``info`` findings. Low-cardinality text (sex, country, diagnosis) is never flagged by
its values except through a strong format (an e-mail is an e-mail even if repeated).
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from plpy_anon.core.errors import AnonError

# Minimum share of sampled non-NULL values that must match a value format.
VALUE_SHARE = 0.5
# Share from which a value finding alone is 'high' confidence.
HIGH_SHARE = 0.9
# Estimated distinct/rows ratio from which a column is near-unique.
NEAR_UNIQUE = 0.9
# Fewer sampled non-NULL values than this: no near-unique or name-shape/free-text verdict.
MIN_VALUES = 20
# Weak value rules (name shape, free text) also need this estimated distinct ratio.
WEAK_RULE_DISTINCT = 0.3

TEXT_CATEGORY = "S"
NUMERIC_TYPES = {"int2", "int4", "int8", "numeric", "float4", "float8", "money", "oid"}
DATE_TYPES = {"date", "timestamp", "timestamptz", "time", "timetz", "interval"}

# kinds whose finding never blocks by itself (reported for information)
INFORMATIONAL = {"birth_date", "near_unique_number"}


class IdentifyingColumns(AnonError):
    """A release would publish, by default, columns that look like they identify people."""

    sqlstate = "42P10"  # invalid_column_reference: the columns' roles must be declared


@dataclass(frozen=True)
class ColumnSample:
    """What the detector looks at for one column."""

    name: str
    type_name: str = "text"          # base pg_type.typname
    category: str = TEXT_CATEGORY    # pg_type.typcategory
    values: tuple = ()               # sampled values (None for NULL), as text for text columns
    rows: int | None = None          # rows in the table (None: the sample is the whole table)
    unique: bool = False             # a single-column unique index


@dataclass(frozen=True)
class Finding:
    column: str
    kind: str
    confidence: str   # 'high' | 'medium' | 'info'
    evidence: str
    blocks_release: bool


# ---------------------------------------------------------------------------- column names

def name_tokens(name: str) -> list[str]:
    """Lower-case ASCII tokens of a column name: 'PatientLastName' -> ['patient', 'last', 'name'],
    'Prénom' -> ['prenom'], 'e-mail' -> ['e', 'mail']."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", ascii_name)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return [t for t in re.split(r"[^a-z0-9]+", spaced.lower()) if t]


# qualifiers that make "name"/"nom" personal; anything else (product_name) is not flagged
_PERSON = {
    "first", "last", "full", "given", "family", "sur", "maiden", "middle", "birth", "legal",
    "display", "real", "user", "patient", "customer", "client", "person", "employee", "contact",
    "member", "owner", "holder", "account", "student", "staff", "doctor", "physician", "nurse",
    "mother", "father", "spouse", "child", "parent", "partner", "emergency", "my", "your", "nick",
    "screen", "login", "pet", "christian", "fore",
    # French
    "famille", "naissance", "usage", "jeune", "fille", "marital", "complet", "epouse", "mari",
    "personne", "salarie", "employe", "adherent", "assure", "eleve",
    "medecin", "titulaire", "pere", "mere", "conjoint",
}
# tokens that are a personal name on their own, or when the whole name is just the token
_NAME_TOKENS = {"firstname", "lastname", "fullname", "surname", "forename", "givenname",
                "familyname", "maidenname", "middlename", "nickname", "username", "login",
                "prenom", "prenoms", "patronyme", "pseudo", "pseudonyme", "nomfamille",
                "nomnaissance", "identite", "signature", "initials", "initiales"}

# (kind, token sequences): a name matches when its token list contains one of the sequences
# (consecutive), or its tokens joined with nothing equal one of the words.
_NAME_RULES: list[tuple[str, list[tuple[str, ...]]]] = [
    ("email", [("email",), ("e", "mail"), ("mail",), ("emails",), ("courriel",), ("mel",),
               ("adresse", "mail"), ("adresse", "electronique")]),
    ("phone", [("phone",), ("telephone",), ("tel",), ("cellphone",), ("telephones",), ("phones",),
               ("fax",), ("gsm",), ("portable",), ("phonenumber",), ("msisdn",), ("mobile",)]),
    ("national_id", [("ssn",), ("social", "security"), ("socialsecurity",), ("sin",), ("nir",),
                     ("insee",), ("secu",), ("securite", "sociale"), ("num", "secu"),
                     ("passport",), ("passeport",), ("national", "id"), ("nationalid",),
                     ("national", "insurance"), ("nino",), ("tax", "id"), ("taxid",),
                     ("tin",), ("nif",), ("driver", "license"), ("drivers", "license"),
                     ("driving", "licence"), ("permis", "conduire"), ("iban",), ("rib",),
                     ("bic",), ("credit", "card"), ("creditcard",), ("card", "number"),
                     ("cardnumber",), ("carte", "bancaire"), ("cc", "number"), ("ccn",),
                     ("cvv",), ("pan",), ("account", "number"), ("numero", "compte"),
                     ("carte", "vitale"), ("carte", "identite"), ("cni",), ("id", "card"),
                     ("medicare",), ("medicaid",), ("nhs", "number")]),
    ("identifier", [("mrn",), ("medical", "record"), ("record", "number"), ("patient", "id"),
                    ("patientid",), ("customer", "id"), ("customerid",), ("client", "id"),
                    ("user", "id"), ("userid",), ("person", "id"), ("personid",),
                    ("employee", "id"), ("employeeid",), ("member", "id"), ("memberid",),
                    ("matricule",), ("identifiant",), ("numero", "dossier"), ("uuid",), ("guid",),
                    ("licence", "plate"), ("license", "plate"), ("plate", "number"),
                    ("immatriculation",)]),
    ("network_id", [("ip",), ("ip", "address"), ("ipaddress",), ("ipv4",), ("ipv6",),
                    ("mac", "address"), ("macaddress",), ("imei",), ("device", "id"),
                    ("cookie",), ("session", "id")]),
    ("address", [("address",), ("street",), ("adresse",), ("rue",), ("voie",), ("addr",),
                 ("home", "address"), ("street", "address"), ("address", "line")]),
    ("free_text", [("comment",), ("comments",), ("note",), ("notes",), ("remark",),
                   ("remarks",), ("free", "text"), ("freetext",), ("commentaire",),
                   ("commentaires",), ("observation",), ("observations",), ("texte",),
                   ("message",), ("narrative",), ("bio",), ("biography",), ("memo",),
                   ("anamnese",), ("compte", "rendu")]),
    ("birth_date", [("birth",), ("birthdate",), ("birthday",), ("dob",), ("born",),
                    ("naissance",), ("date", "naissance"), ("ddn",)]),
]


def _contains(tokens: list[str], seq: tuple[str, ...]) -> bool:
    n = len(seq)
    return any(tuple(tokens[i:i + n]) == seq for i in range(len(tokens) - n + 1))


def name_kind(name: str) -> tuple[str, str] | None:
    """(kind, matched words) if the column's name says what it identifies, else None."""
    tokens = name_tokens(name)
    if not tokens:
        return None
    joined = "".join(tokens)
    # personal names first: 'name'/'nom' with a personal qualifier or alone
    for tok in tokens:
        if tok in _NAME_TOKENS:
            return "name", tok
    if joined in _NAME_TOKENS:
        return "name", joined
    for word in ("name", "names", "nom", "noms"):
        if word in tokens:
            others = [t for t in tokens if t != word]
            if not others or any(t in _PERSON for t in others):
                return "name", "_".join(tokens)
    for kind, seqs in _NAME_RULES:
        for seq in seqs:
            # short words ('ip', 'tel', 'rue', 'sin') only ever match whole tokens
            if _contains(tokens, seq) or (len(seq) > 1 and joined == "".join(seq)):
                return kind, " ".join(seq)
    return None


# ---------------------------------------------------------------------------- value formats

_EMAIL = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}$")
_SSN = re.compile(r"^(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}$")
_NIR = re.compile(r"^([1278])\s?(\d{2})\s?(0[1-9]|1[0-2]|[2-9]\d)\s?(\d{2}|2[AB])\s?(\d{3})\s?"
                  r"(\d{3})\s?(\d{2})$", re.IGNORECASE)
_IBAN = re.compile(r"^[A-Z]{2}\d{2}[A-Z0-9]{11,30}$")
_CARD = re.compile(r"^\d(?:[ -]?\d){12,18}$")
_UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
                   re.IGNORECASE)
_IPV4 = re.compile(r"^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$")
_PHONE_SHAPE = re.compile(r"^\+?(?:\(\d{1,4}\)|\d)[\d\s().-]*\d$")
_DATE_LIKE = re.compile(r"^\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|^\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}$")
_UP, _LOW = "A-ZÀ-ÖØ-Þ", "a-zß-öø-ÿ"
_NAME_WORD = (rf"[{_UP}](?:[{_LOW}]+|['’][{_UP}][{_LOW}]+)"          # Dupont, O'Neil
              rf"(?:(?:['’-]|(?=[{_UP}]))[{_UP}{_LOW}][{_LOW}]+)*\.?")  # Jean-Pierre, McDonald
_PERSON_NAME = re.compile(rf"^(?:{_NAME_WORD}|[A-Z]\.)(?:\s+(?:(?:de|da|di|van|von|der|del|le|la|du|"
                          rf"des|bin|al|ben)\s+)*(?:{_NAME_WORD}|[A-Z]\.)){{1,3}}$")


def is_email(v: str) -> bool:
    return len(v) <= 254 and _EMAIL.match(v) is not None


def is_phone(v: str) -> bool:
    """International or national phone numbers: '+33 6 12 34 56 78', '(555) 123-4567',
    '06.12.34.56.78', '0612345678', '+14155550123'. Plain digit runs count only when they start
    with '+' or '0' (a national trunk prefix); dates and SSNs are not phones."""
    v = v.strip()
    if not _PHONE_SHAPE.match(v) or _DATE_LIKE.match(v) or _SSN.match(v):
        return False
    digits = re.sub(r"\D", "", v)
    if not 9 <= len(digits) <= 15:
        return False
    formatted = re.search(r"[\s().-]", v) is not None
    return v.startswith(("+", "0", "(")) or (formatted and len(re.findall(r"\d+", v)) >= 3)


def is_ssn(v: str) -> bool:
    return _SSN.match(v.strip()) is not None


def is_nir(v: str) -> bool:
    """French social security number (NIR / INSEE): 13 characters and a 2-digit key
    97 - (number mod 97), Corsica's 2A/2B counted as 19/18."""
    m = _NIR.match(v.strip())
    if not m:
        return False
    body = "".join(m.groups()[:6]).upper()
    body = body.replace("2A", "19") if m.group(4).upper() == "2A" else body
    body = body.replace("2B", "18") if m.group(4).upper() == "2B" else body
    if not body.isdigit():
        return False
    return 97 - int(body) % 97 == int(m.group(7))


def is_iban(v: str) -> bool:
    """IBAN with a valid ISO 13616 mod-97 check."""
    s = re.sub(r"\s", "", v).upper()
    if not _IBAN.match(s):
        return False
    moved = s[4:] + s[:4]
    number = "".join(str(int(ch, 36)) for ch in moved)
    return int(number) % 97 == 1


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def is_card(v: str) -> bool:
    """Payment card number: 13-19 digits (spaces/dashes allowed), Luhn-valid, not all one digit."""
    v = v.strip()
    if not _CARD.match(v):
        return False
    digits = re.sub(r"\D", "", v)
    return len(set(digits)) > 1 and luhn_ok(digits)


def is_national_id(v: str) -> bool:
    return is_ssn(v) or is_nir(v) or is_iban(v) or is_card(v)


def is_uuid(v: str) -> bool:
    return _UUID.match(v.strip()) is not None


def is_ipv4(v: str) -> bool:
    return _IPV4.match(v.strip()) is not None


def is_person_name(v: str) -> bool:
    """'Jean-Pierre Dupont', "Mary O'Neil", 'J. R. Smith', 'Ludwig van Beethoven': 2 to 4
    capitalized words. Weak on its own (city names match): used with a cardinality condition."""
    return _PERSON_NAME.match(v.strip()) is not None


def is_free_text(v: str) -> bool:
    """A sentence rather than a label: at least 6 words or 50 characters with spaces."""
    words = v.split()
    return len(words) >= 6 or (len(v) >= 50 and len(words) >= 3)


# (kind, label, predicate, strong): strong formats count whatever the cardinality
VALUE_RULES = [
    ("email", "e-mail address", is_email, True),
    ("national_id", "US SSN", is_ssn, True),
    ("national_id", "French NIR/INSEE (key checked)", is_nir, True),
    ("national_id", "IBAN (mod-97 checked)", is_iban, True),
    ("national_id", "payment card number (Luhn checked)", is_card, True),
    ("identifier", "UUID", is_uuid, True),
    ("network_id", "IPv4 address", is_ipv4, True),
    ("phone", "phone number", is_phone, True),
    ("name", "personal-name shape", is_person_name, False),
    ("free_text", "free text", is_free_text, False),
]


# ---------------------------------------------------------------------------- distinct values

def estimate_distinct_ratio(values, rows: int | None) -> tuple[float, int, int]:
    """(estimated distinct/rows over the table, distinct in the sample, non-NULL sampled).

    ``rows`` is the table's row count; None or <= the sample size means the sample is the whole
    table (exact). Otherwise Haas & Stokes' Duj1: D = n d / (n - f1 + f1 n / N), with n the
    sampled non-NULL values, d their distinct count, f1 the values seen once. NULLs count as rows
    (a mostly-NULL column is not near-unique)."""
    present = [v for v in values if v is not None]
    n = len(present)
    if n == 0:
        return 0.0, 0, 0
    counts: dict = {}
    for v in present:
        counts[v] = counts.get(v, 0) + 1
    d = len(counts)
    total_sampled = len(values)
    if rows is None or rows <= total_sampled:
        return d / total_sampled, d, n
    big_n = rows * n / total_sampled  # non-NULL rows in the table, estimated
    f1 = sum(1 for c in counts.values() if c == 1)
    denominator = n - f1 + f1 * n / big_n
    estimate = n * d / denominator if denominator > 0 else big_n
    estimate = min(max(estimate, d), big_n)
    return estimate / rows, d, n


# ---------------------------------------------------------------------------- the detector

def _is_text(col: ColumnSample) -> bool:
    return col.category == TEXT_CATEGORY


def detect_column(col: ColumnSample) -> list[Finding]:
    """Every finding for one column (possibly none)."""
    findings: list[Finding] = []
    by_name = name_kind(col.name)
    ratio, distinct, n = estimate_distinct_ratio(list(col.values), col.rows)
    value_hits: list[tuple[str, str, float]] = []
    if _is_text(col) and n:
        present = [str(v) for v in col.values if v is not None]
        seen: set[str] = set()
        for kind, label, predicate, strong in VALUE_RULES:
            if kind in seen:
                continue
            if not strong and (n < MIN_VALUES or ratio < WEAK_RULE_DISTINCT):
                continue
            share = sum(1 for v in present if predicate(v)) / n
            if share >= VALUE_SHARE:
                value_hits.append((kind, label, share))
                seen.add(kind)
    if by_name is not None:
        kind, words = by_name
        agreeing = [h for h in value_hits if h[0] == kind]
        evidence = f"column name matches '{words}'"
        if agreeing:
            evidence += f"; {agreeing[0][2]:.0%} of {n} sampled values look like {agreeing[0][1]}"
        if kind == "birth_date":
            findings.append(Finding(col.name, kind, "info", evidence
                                    + " (a quasi-identifier: generalized, not blocking)", False))
        elif kind == "free_text" and not _is_text(col):
            pass  # a numeric 'note' is a grade, not free text
        else:
            findings.append(Finding(col.name, kind, "high" if agreeing else "medium", evidence,
                                    True))
    for kind, label, share in value_hits:
        if by_name is not None and by_name[0] == kind:
            continue
        confidence = "high" if share >= HIGH_SHARE else "medium"
        findings.append(Finding(col.name, kind, confidence,
                                f"{share:.0%} of {n} sampled values look like {label}", True))
    if n >= MIN_VALUES and ratio >= NEAR_UNIQUE and not col.unique:
        evidence = (f"about {ratio:.0%} of rows have a distinct value "
                    f"({distinct} distinct among {n} sampled non-NULL values)")
        if _is_text(col):
            findings.append(Finding(col.name, "near_unique", "high" if ratio >= 0.99 else "medium",
                                    evidence, True))
        elif col.type_name in NUMERIC_TYPES or col.type_name in DATE_TYPES:
            findings.append(Finding(col.name, "near_unique_number", "info",
                                    evidence + " (numbers and dates are generalized into ranges: "
                                    "not blocking)", False))
        else:
            findings.append(Finding(col.name, "near_unique", "medium", evidence, True))
    if col.unique:
        findings.append(Finding(col.name, "unique_key", "high",
                                "a single-column unique index (dropped as an identifier by "
                                "default)", False))
    return findings


def detect(columns: list[ColumnSample]) -> list[Finding]:
    """Findings for every column, in column order."""
    out: list[Finding] = []
    for col in columns:
        out.extend(detect_column(col))
    return out


def blocking(findings: list[Finding]) -> dict[str, list[Finding]]:
    """column -> its blocking findings, for columns with at least one."""
    out: dict[str, list[Finding]] = {}
    for f in findings:
        if f.blocks_release:
            out.setdefault(f.column, []).append(f)
    return out
