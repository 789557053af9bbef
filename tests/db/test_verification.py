"""Every release is checked from its released rows, in SQL, before it is published (verify.py).

A fresh release of every method is verified and its figures equal counts made here with SQL of our
own. Faults are injected from outside the code: as superuser the method's STABLE partitioning
function is replaced by one that tampers with the real run's result (classes split below k, rows
dropped as a containment filter drops them, sensitive-table counts changed); a create is then
refused with nothing left, and a refresh -- through anon.refresh and through a plain REFRESH
MATERIALIZED VIEW -- is refused with the old release still readable and the failure recorded.
"""
from __future__ import annotations

import contextlib
import json

import psycopg
import pytest

from tests.db.test_break_merge import _break, _load, _people
from tests.db.test_fusion import enterprise, frames, resilient_view  # noqa: F401 (fixtures)
from tests.db.test_trust import PEOPLE as TRUST_PEOPLE
from tests.db.test_trust import purpose, record, requester, role, trust_view  # noqa: F401
from tests.helpers import class_sizes, distinct_sensitive_per_class, matview, release_schema_of

PATIENTS = """
CREATE TABLE patients (id int PRIMARY KEY, age int, zip text, sex text, diagnosis text);
INSERT INTO patients
SELECT i, 20 + (i * 7) % 50, (ARRAY['13000', '13500', '14000', '22000'])[1 + (i * 3) % 4],
       CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END,
       (ARRAY['flu', 'cold', 'asthma', 'diabetes', 'gastritis'])[1 + (i * 11) % 5]
FROM generate_series(1, 300) i;
SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive');
"""
QIS = ["age", "zip", "sex"]


@pytest.fixture
def patients(db, schema):
    db.execute(PATIENTS)
    return f"{schema}.patients"


def catalog(db, relation):
    schema, name = relation.replace('"', "").split(".")
    return db.execute("SELECT release_id, verified, verification, last_error FROM anon.releases "
                      "WHERE release_schema = %s AND release_name = %s", (schema, name)).fetchone()


def count(db, relation):
    return db.execute(f"SELECT count(*) FROM {relation}").fetchone()[0]


def mondrian(db, schema, k=5, l=None, name="rel"):
    return db.execute(
        "SELECT anon.mondrian_view('patients', k => %s, l => %s, identifiers => ARRAY['id'], "
        "release_name => %s, release_schema => %s)", (k, l, name, release_schema_of(schema))).fetchone()[0]


def assert_verified(db, relation, *, source_rows, qis=None, k=None, sensitive=(), l=None):
    """verified = true and the stored figures equal this test's own SQL counts."""
    _, verified, figures, _ = catalog(db, relation)
    assert verified is True
    released = count(db, relation)
    assert figures["rows_released"] == released == figures["rows_expected"]
    assert released <= source_rows
    if qis:
        sizes = class_sizes(db, relation, qis)
        assert figures["smallest_class"] == min(sizes) >= k
        assert figures["classes"] == len(sizes)
    for col in sensitive:
        smallest = min(distinct_sensitive_per_class(db, relation, qis, col))
        assert figures["l_by_column"][col] == smallest >= l
    assert figures["seconds"] >= 0 and figures["checked_at"]
    status = db.execute("SELECT verified, verification FROM anon.release_status() WHERE release = %s",
                        (relation,)).fetchone()
    assert status == (True, figures)
    return figures


# ---------------------------------------------------------------------------- every method

def test_mondrian_release_is_verified_with_independent_figures(db, schema, patients):
    rel = mondrian(db, schema, k=5)
    assert_verified(db, rel, source_rows=300, qis=QIS, k=5)
    rel = mondrian(db, schema, k=4, l=3, name="rel_l")
    figures = assert_verified(db, rel, source_rows=300, qis=QIS, k=4, sensitive=["diagnosis"], l=3)
    assert figures["rows_expected"] == 300 and figures["l"] == 3


def test_l_is_checked_for_every_sensitive_column(db, schema, patients):
    rel = db.execute("SELECT anon.mondrian_view('patients', k => 4, l => 2, "
                     "quasi_identifiers => ARRAY['age', 'zip'], sensitive => ARRAY['diagnosis', 'sex'], "
                     "identifiers => ARRAY['id'], release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    figures = assert_verified(db, rel, source_rows=300, qis=["age", "zip"], k=4,
                              sensitive=["diagnosis", "sex"], l=2)
    assert set(figures["l_by_column"]) == {"diagnosis", "sex"}


def test_check_and_stored_risk_report_share_one_pass_over_the_release(db, schema, patients):
    """The check and the report read the same classes (class_counts.Counter): a build scans the
    released rows once, and the report's figures are the check's (both equal to this test's own
    counts through assert_verified)."""
    def scans(relation):
        db.execute("SELECT pg_catalog.pg_stat_force_next_flush()")
        return db.execute("SELECT coalesce(seq_scan, 0) FROM pg_catalog.pg_stat_user_tables "
                          "WHERE relid = %s::regclass", (relation,)).fetchone()[0]

    rel = mondrian(db, schema, k=4, l=3, name="one_pass")
    stored = matview(db, rel)
    # a compact release's storage (one row per class) is read once too, for its counts and a
    # hash of each class's QIs (classes that may merge); a release refreshed in the stable mode
    # (l and a primary key) is read twice more by its cross-version checks (republication.py:
    # the classes people are matched to; the classes' multisets and boxes, for the difference
    # and overlap checks, in one statement)
    passes = 1 + (2 if db.execute(
        "SELECT parameters->>'refresh_mode' FROM anon.releases WHERE release_id = %s",
        (catalog(db, rel)[0],)).fetchone()[0] == "stable" else 0)
    assert scans(stored) == passes
    figures = assert_verified(db, rel, source_rows=300, qis=QIS, k=4, sensitive=["diagnosis"], l=3)
    risk = {(r["measure"], r["column_name"]): r["value"] for r in db.execute(
        "SELECT risk FROM anon.releases WHERE release_id = %s", (catalog(db, rel)[0],)).fetchone()[0]}
    assert risk["smallest_class", None] == figures["smallest_class"]
    assert risk["classes", None] == figures["classes"]
    assert risk["rows", None] == figures["rows_released"]
    assert risk["distinct_l", "diagnosis"] == figures["l_by_column"]["diagnosis"]
    before = scans(stored)                                # the counts made here read it too
    db.execute(f"REFRESH MATERIALIZED VIEW {stored}")     # the event trigger's check and report
    assert scans(stored) == before + passes
    assert catalog(db, rel)[1] is True


def test_prioritized_mondrian_release_is_verified(db, schema, patients):
    rel = db.execute("SELECT anon.mondrian_view('patients', k => 6, priorities => '{\"zip\": 1}'::jsonb, "
                     "identifiers => ARRAY['id'], release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    assert_verified(db, rel, source_rows=300, qis=QIS, k=6)


def test_trust_release_is_verified_with_suppressed_rows_excluded(db, schema, requester, purpose):  # noqa: F811
    db.execute(TRUST_PEOPLE)
    record(db, requester, ["good"] * 20)
    name, _ = purpose({"age": 1, "sex": 1, "job": 1})
    rel = trust_view(db, schema, f'"{schema}".people', requester, name, k=10, max_suppression=0.05)
    figures = assert_verified(db, rel, source_rows=400, qis=["age", "sex", "job"], k=10)
    metrics = db.execute("SELECT metrics FROM anon.releases WHERE release_schema = %s",
                         (release_schema_of(schema),)).fetchone()[0]
    assert figures["rows_expected"] == 400 - metrics["cost"]["rows_suppressed"]


def test_pattern_release_is_verified_on_its_row_count(db, schema, patients):
    rel = db.execute("SELECT anon.pattern_view('patients', columns => ARRAY['age'], segment => 20, "
                     "iterations => 200, seed => 1, sensitive => ARRAY['diagnosis'], release_schema => %s)",
                     (release_schema_of(schema),)).fetchone()[0]
    figures = assert_verified(db, rel, source_rows=300)
    assert figures["rows_expected"] == 300 and figures["smallest_class"] is None


def test_fusion_release_is_verified_over_its_centroids(db, schema, enterprise):  # noqa: F811
    rel = resilient_view(db, schema)
    k = db.execute("SELECT (parameters->>'k')::int FROM anon.releases WHERE release_schema = %s",
                   (release_schema_of(schema),)).fetchone()[0]
    assert_verified(db, rel, source_rows=len(enterprise[0]), qis=["perf_1", "perf_2", "perf_3"], k=k)


def test_break_merge_release_is_verified_on_qit_and_sensitive_tables(db, schema):
    source = _load(db, schema, _people(600))
    rel = _break(db, schema, source, k=5, l=2)
    _, verified, figures, _ = catalog(db, rel)
    qit = f"{release_schema_of(schema)}.people_bm_qit"
    assert verified is True
    assert figures["rows_released"] == count(db, qit) == figures["rows_expected"] == 600
    assert figures["smallest_class"] == min(class_sizes(db, qit, ["age", "sex", "zip"])) >= 5
    for attribute in ("workclass", "income"):
        st = f"{release_schema_of(schema)}.people_bm_st_{attribute}"
        smallest = db.execute(f"SELECT min(n) FROM (SELECT count(DISTINCT value) AS n FROM {st} "
                              "GROUP BY gid) g").fetchone()[0]
        assert figures["l_by_column"][attribute] == smallest >= 2
        assert db.execute(f"SELECT sum(count) FROM {st}").fetchone()[0] == 600


# ---------------------------------------------------------------------------- fault injection

# a slice's literals by key (q<i>, then s<j>: generalization.literal_keys), unpacked as SQL reads
# them, and packed back
PACKED = """
from plpy_anon.db.generalization import pack_literals
def unpacked(p):
    n_qis = len(_json.loads(plpy.execute(
        "SELECT parameters::text AS p FROM anon.releases WHERE release_id = %d" % release_id
    )[0]["p"])["quasi_identifiers"])
    keys = ["q%d" % i for i in range(n_qis)] + ["s%d" % j for j in range(len(p["literals"]) - n_qis)]
    out = {}
    for n, key in enumerate(keys):
        separator, null = p["separators"][2 * n:2 * n + 2]
        out[key] = [None if f == null else f for f in p["literals"][n].decode().split(separator)[1:]]
    return out
def packed(p, classes):
    texts = [pack_literals(classes[key]) for key in classes]
    p["literals"], p["separators"] = [t for t, _ in texts], "".join(m for _, m in texts)
"""

SPLIT_BELOW_K = """
import json as _json
""" + PACKED + """
def widen(lit):
    return lit if lit is None else (lit[:-1] + ",zzzzz}" if lit != "{}" else "{zzzzz}")
out = []
for p in mondrian.partition(plpy, GD, release_id):
    # every class split in two (its rows come grouped by class: first half, second half); the
    # second half's zip set gets an extra element, so both halves still contain their rows
    # (containment holds) but are distinct released classes below k
    sizes = [int(x) for x in p["class_sizes"].strip("{}").split(",")]
    classes = unpacked(p)
    p["class_sizes"] = "{" + ",".join(f"{n - n // 2},{n // 2}" for n in sizes) + "}"
    p["first_class"] = 2 * p["first_class"]
    def halves(q, lit):
        if q.startswith("s"):          # written from the values read: each half its own rows
            rows = lit[1:-1].split(",")
            return ("{" + ",".join(rows[:len(rows) - len(rows) // 2]) + "}",
                    "{" + ",".join(rows[len(rows) - len(rows) // 2:]) + "}")
        return (lit, widen(lit) if q == "q1" else lit)
    packed(p, {q: [v for lit in lits for v in halves(q, lit)] for q, lits in classes.items()})
    out.append(p)
return out
"""

DROP_ROWS = """
import json as _json
""" + PACKED + """
out = list(mondrian.partition(plpy, GD, release_id))
p = out[0]
sizes = p["class_sizes"].strip("{}").split(",")
# three rows not emitted (the first class's first three): what the release query's containment
# filter does to a row outside its box
if p["ctids_utf8"] is None:            # written from the values read: the first class's array
    classes = unpacked(p)
    classes["s0"][0] = "{" + ",".join(classes["s0"][0][1:-1].split(",")[3:]) + "}"
    packed(p, classes)
else:
    tids = p["ctids_utf8"].decode()[2:-2].split('","')
    p["ctids_utf8"] = ('{"' + '","'.join(tids[3:]) + '"}').encode()
p["class_sizes"] = "{" + ",".join([str(int(sizes[0]) - 3)] + sizes[1:]) + "}"
return out
"""


@contextlib.contextmanager
def tampered(db, function, body, call):
    """Replace ``function`` (its real PL/Python body, bootstrap included) so that it ends with
    ``body`` instead of ``call``; restore the original whatever happens."""
    original = db.execute("SELECT pg_get_functiondef(%s::regprocedure)", (function,)).fetchone()[0]
    line = next(x for x in original.splitlines() if x.strip() == call)
    db.execute(original.replace(line, body.strip()))
    try:
        yield
    finally:
        db.execute(original)


def mondrian_tampered(db, body):
    return tampered(db, "anon._mondrian_partition_slices_py(integer)", body,
                    "return mondrian.partition(plpy, GD, release_id)")


def release_rows(db, relation):
    return db.execute(f"SELECT * FROM {relation} ORDER BY 1, 2, 3, 4").fetchall()


@pytest.mark.parametrize("body, message", [
    (SPLIT_BELOW_K, "smallest class has {} rows, k = 5 promised"),
    (DROP_ROWS, "297 rows released, 300 expected (300 source rows read, 0 suppressed)"),
])
def test_create_of_a_release_breaking_its_promise_is_refused_and_leaves_nothing(db, schema, patients,
                                                                                 body, message):
    with mondrian_tampered(db, body), pytest.raises(psycopg.errors.DataException) as failed:
        mondrian(db, schema, k=5)
    text = failed.value.diag.message_primary
    assert text.startswith(f"release {release_schema_of(schema)}.rel: ")
    if "{}" in message:     # the smallest class the tampered run made, counted here
        assert "k = 5 promised" in text and "smallest class has " in text
    else:
        assert message in text
    assert json.loads(failed.value.diag.message_detail.removeprefix("figures: "))["k"] == 5
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == 0
    assert db.execute("SELECT to_regclass(%s)", (f"{release_schema_of(schema)}.rel",)).fetchone()[0] is None
    rel = mondrian(db, schema, k=5)        # the real function is back: the release is fine
    assert catalog(db, rel)[1] is True


# the check of a built release whose catalog row says k = 1 (a row the declaration refuses at
# every run: edited after it, or written by other code)
CHECK_WITH_K_1 = """
DO $check$
import json
from plpy_anon.db import release_rows, verify
from plpy_anon.db.methods.registry import REGISTRY
release = release_rows.find(plpy, %s)
release = {**release, "parameters": json.dumps({**json.loads(release["parameters"]), "k": 1})}
try:
    verify.check(plpy, release, {"source_rows": 300}, REGISTRY["mondrian"])
except verify.VerificationFailed as refused:
    plpy.error(refused.message)
$check$ LANGUAGE plpython3u"""


def test_a_promise_below_the_smallest_k_is_refused_from_the_released_rows(db, schema, patients):
    """k = 1 holds of any rows: the verification refuses the promise itself, with the one
    minimum of the declaration and the core."""
    rel = mondrian(db, schema, k=5)
    with pytest.raises(psycopg.Error) as failed:
        db.execute(CHECK_WITH_K_1.replace("%s", f"'{rel}'"))
    assert "k = 1 promised, below the smallest k of any release (2)" in \
        failed.value.diag.message_primary


@pytest.mark.parametrize("how", ["anon.refresh", "REFRESH MATERIALIZED VIEW"])
@pytest.mark.parametrize("body", [SPLIT_BELOW_K, DROP_ROWS], ids=["below_k", "rows_dropped"])
def test_refresh_of_a_release_breaking_its_promise_keeps_the_old_release(db, schema, patients,
                                                                         how, body):
    rel = mondrian(db, schema, k=5)
    release_id, _, figures_before, _ = catalog(db, rel)
    before = release_rows(db, rel)
    db.execute(f"INSERT INTO {patients} SELECT i, 30, '13000', 'F', 'flu' FROM generate_series(301, 320) i")
    with mondrian_tampered(db, body), pytest.raises(psycopg.errors.DataException) as failed:
        if how == "anon.refresh":
            db.execute("SELECT anon.refresh(%s)", (rel,))
        else:
            db.execute(f"REFRESH MATERIALIZED VIEW {matview(db, rel)}")
    diag = failed.value.diag
    assert diag.message_primary.startswith(f"release {release_schema_of(schema)}.rel: ")   # no plpy.Error: prefix
    assert diag.sqlstate == "22000" and diag.message_detail.startswith("figures: ")
    for field in (diag.message_primary, diag.message_detail, diag.message_hint or "",
                  diag.context or ""):
        assert "plpy.Error" not in field and "Traceback" not in field
    assert release_rows(db, rel) == before                       # the old release, still readable
    _, verified, figures, last_error = catalog(db, rel)
    assert verified is True and figures == figures_before        # describes the old release
    assert last_error.startswith(f"release {release_schema_of(schema)}.rel: ")
    history = db.execute("SELECT succeeded, error, sqlstate FROM anon.refresh_history "
                         "WHERE release_id = %s ORDER BY refresh_id", (release_id,)).fetchall()
    assert len(history) == 1                                     # recorded once, not twice
    assert history[0][0] is False and history[0][2] == "22000"
    assert history[0][1].startswith(f"release {release_schema_of(schema)}.rel: ")
    db.execute("SELECT anon.refresh(%s)", (rel,))                # the real function: it refreshes
    assert catalog(db, rel)[1] is True and count(db, rel) == 320


BREAK_ST_COUNT = """
import json as _json
r = _json.loads(break_merge.run_release(plpy, GD, release_id))
r["st"]["count"][0] += 1        # a sensitive table counting one row the QIT does not have
return _json.dumps(r)
"""


def test_break_merge_sensitive_tables_must_count_the_qit_rows(db, schema):
    source = _load(db, schema, _people(300))
    with tampered(db, "anon._break_merge_run_py(integer)", BREAK_ST_COUNT,
                  "return break_merge.run_release(plpy, GD, release_id)"), \
            pytest.raises(psycopg.errors.DataException) as failed:
        _break(db, schema, source, k=5, l=2)
    assert "do not count the same rows as the quasi-identifier table" in failed.value.diag.message_primary
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == 0


@pytest.mark.parametrize("how", ["anon.refresh", "REFRESH MATERIALIZED VIEW"])
def test_break_merge_refresh_breaking_the_counts_keeps_the_old_release(db, schema, how):
    source = _load(db, schema, _people(300))
    rel = _break(db, schema, source, k=5, l=2)
    release_id = catalog(db, rel)[0]
    qit = f"{release_schema_of(schema)}.people_bm_qit"
    before = db.execute(f"SELECT * FROM {qit} ORDER BY 1, 2, 3, 4").fetchall()
    db.execute(f"DELETE FROM {source} WHERE id < 20")
    function = "anon._break_merge_run_py(integer)"
    with tampered(db, function, BREAK_ST_COUNT, "return break_merge.run_release(plpy, GD, release_id)"), \
            pytest.raises(psycopg.errors.DataException) as failed:
        if how == "anon.refresh":
            db.execute("SELECT anon.refresh(%s)", (rel,))
        else:
            db.execute(f"REFRESH MATERIALIZED VIEW {matview(db, rel)}")
    assert "do not count the same rows" in failed.value.diag.message_primary
    assert db.execute(f"SELECT * FROM {qit} ORDER BY 1, 2, 3, 4").fetchall() == before
    history = db.execute("SELECT succeeded, sqlstate FROM anon.refresh_history WHERE release_id = %s",
                         (release_id,)).fetchall()
    assert history == [(False, "22000")]
    assert catalog(db, rel)[3].startswith(f"release {release_schema_of(schema)}.people_bm: ")
    db.execute("SELECT anon.refresh(%s)", (rel,))
    assert catalog(db, rel)[1] is True and count(db, qit) == 280          # ids 0..19 deleted


# the class x value table of a relation as class_counts reads it, a few classes per fetch
COUNTED_PAIRS = """
CREATE OR REPLACE FUNCTION pg_temp.counted_pairs(relation text, per_fetch int) RETURNS text AS $counted$
import json
from plpy_anon.db import class_counts
class_counts.FETCH_CLASSES = per_fetch
counts = class_counts.count(plpy, relation, ["age", "zip"], ["diagnosis"])
owners, values, rows = counts.tables["diagnosis"]
pairs = {}
for c, v, n in zip(owners.tolist(), values.tolist(), rows.tolist()):
    pairs.setdefault(c, []).append([v, n])
return json.dumps({"sizes": dict(zip(counts.sizes.tolist(), counts.classes.tolist())),
                   "classes": sorted(sorted(p) for p in pairs.values())})
$counted$ LANGUAGE plpython3u"""


@pytest.mark.parametrize("fetch", [1, 7, 100_000])
def test_class_value_table_read_a_few_classes_at_a_time_is_the_one_counted_in_sql(
        db, schema, patients, fetch):
    """The check's class x value table is read class by class through a cursor: whatever the
    fetch size, every class's (value rank, rows) pairs (NULL as -1) and the class-size histogram
    are those counted here in SQL."""
    db.execute(f"UPDATE {patients} SET diagnosis = NULL WHERE id % 7 = 0")
    db.execute(COUNTED_PAIRS)
    got = json.loads(db.execute("SELECT pg_temp.counted_pairs(%s, %s)",
                                (patients, fetch)).fetchone()[0])
    ranked = ("SELECT d, dense_rank() OVER (ORDER BY d) - 1 AS r "
              f"FROM (SELECT DISTINCT diagnosis AS d FROM {patients} WHERE diagnosis IS NOT NULL) AS u")
    pairs = db.execute(
        f"SELECT array_agg(ARRAY[coalesce(r.r, -1), p.n] ORDER BY coalesce(r.r, -1)) "
        f"FROM (SELECT age, zip, diagnosis, count(*) AS n FROM {patients} "
        f"      GROUP BY age, zip, diagnosis) AS p LEFT JOIN ({ranked}) AS r ON r.d = p.diagnosis "
        f"GROUP BY p.age, p.zip").fetchall()
    sizes = db.execute(f"SELECT n, count(*) FROM (SELECT count(*) AS n FROM {patients} "
                       f"GROUP BY age, zip) AS c GROUP BY n").fetchall()
    assert got["classes"] == sorted(p for (p,) in pairs)
    assert {int(k): v for k, v in got["sizes"].items()} == dict(sizes)
    assert len(got["classes"]) > 7 and any(v == -1 for c in got["classes"] for v, _ in c)
