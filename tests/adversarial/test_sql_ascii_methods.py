"""Adversarial: a SQL_ASCII database's texts that are not UTF-8 (a LATIN1 é alone, 0x80, 0xFF) in
the columns every method reads: a QI, a sensitive column, the stable mode's identifier. PL/Python
reads no such text (PLyUnicode_FromStringAndSize checks it as UTF-8), so each run is refused
before it reads anything (22021, the column named, a hint), builds nothing and keeps the previous
release; a column no run reads into Python (a pattern release's sensitive one) goes through as
its bytes. Checked from the catalog and the released rows."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.helpers import class_sizes, encoded_database
from tests.runs import examples

VALUES = [b"caf\xe9", b"\x80", b"\xff\xfe", b"plain", b'"q"', b"{a,b}", b"NULL", b""]
#: the value of VALUES picked by ``i`` (parameters: VALUES in hex, their number)
BYTES = "convert_from(('\\x' || (%s::text[])[1 + i %% %s])::bytea, 'SQL_ASCII')"


@pytest.fixture(scope="module")
def db(connect):
    with encoded_database(connect, "SQL_ASCII") as name, connect(dbname=name) as conn:
        conn.execute("SET client_encoding = 'SQL_ASCII'")
        conn.execute("CREATE SCHEMA rel")
        yield conn


def table_of_bytes(conn, table: str, rows: int = 600) -> None:
    """``table``: QIs n (int) and m (float8), ``w`` and ``g`` holding VALUES' bytes (g shifted by
    three), ``s`` plain, identifiers id and pid."""
    hexes = [v.hex() for v in VALUES]
    conn.execute(f"CREATE TABLE {table} (id int, pid text, n int, m float8, w text, s text, g text)")
    conn.execute(f"INSERT INTO {table} SELECT i, 'p' || i, i %% 40, i %% 37, {BYTES}, 's' || i %% 3, "
                 f"{BYTES.replace('1 + i %% %s', '1 + (i + 3) %% %s')} FROM generate_series(1, %s) i",
                 (hexes, len(VALUES), hexes, len(VALUES), rows))


def text(value) -> str:
    """A text as this session reads it (client_encoding SQL_ASCII: bytes) as str."""
    return value.decode() if isinstance(value, bytes) else value


def refused(conn, call: str, column: str, release: str) -> psycopg.Error:
    """Run ``call``; assert it is refused clearly naming ``column``, with nothing of ``release``
    left in the catalog or the release schema."""
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(call)
    error = caught.value
    assert error.sqlstate == "22021", str(error)
    assert f'column "{column}"' in error.diag.message_primary, str(error)
    assert "not UTF-8" in error.diag.message_primary and error.diag.message_hint
    assert conn.execute("SELECT count(*) FROM anon.releases WHERE release_name = %s",
                        (release,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = "
                        "'rel'::regnamespace AND relname LIKE %s", (f"{release}%",)).fetchone()[0] == 0
    return error


CALLS = {
    # name: (call, the column named)
    "mondrian_flat_qi": (("anon.mondrian_view('t', 5, quasi_identifiers => ARRAY['n', 'w'], "
                         "sensitive => ARRAY['s'], layout => 'flat'"), "w"),
    "mondrian_sensitive": (("anon.mondrian_view('t', 5, quasi_identifiers => ARRAY['n'], "
                           "sensitive => ARRAY['g']"), "g"),
    "mondrian_sensitive_l": (("anon.mondrian_view('t', 5, l => 2, quasi_identifiers => ARRAY['n'], "
                             "sensitive => ARRAY['g']"), "g"),
    "mondrian_undeclared_roles": (("anon.mondrian_view('t', 5, sensitive => ARRAY['s'], "
                                  "identifiers => ARRAY['id', 'pid', 'g']"), "w"),
    "break_merge_qi": (("anon.break_merge('t', k => 5, quasi_identifiers => ARRAY['n', 'w'], "
                       "sensitive => ARRAY['s']"), "w"),
    "break_merge_sensitive": (("anon.break_merge('t', k => 5, l => 2, quasi_identifiers => ARRAY['n'], "
                              "sensitive => ARRAY['g']"), "g"),
    "mdav_sensitive": (("anon.mdav_view('t', 5, quasi_identifiers => ARRAY['n', 'm'], "
                       "sensitive => ARRAY['g']"), "g"),
    "stable_qi": (("anon.mondrian_view('t', 5, quasi_identifiers => ARRAY['n', 'w'], sensitive => "
                  "ARRAY['s'], identifiers => ARRAY['pid'], refresh_mode => 'stable'"), "w"),
    "stable_identifier": (("anon.mondrian_view('t', 5, quasi_identifiers => ARRAY['n'], sensitive => "
                          "ARRAY['s'], identifiers => ARRAY['g'], refresh_mode => 'stable'"), "g"),
}


@pytest.fixture(scope="module")
def source(db):
    table_of_bytes(db, "t")
    return "t"


@pytest.mark.parametrize("name", list(CALLS))
def test_each_method_refuses_a_column_of_bytes_that_are_not_utf8_clearly(db, source, name):
    call, column = CALLS[name]
    refused(db, f"SELECT {call}, release_schema => 'rel', release_name => '{name}')", column, name)


def test_the_sample_of_undeclared_columns_reads_such_bytes(db, source):
    """anon.detect_identifiers reads a sample of every column (shapes only): it answers, and finds
    the identifiers."""
    found = {text(c) for (c,) in db.execute("SELECT column_name FROM anon.detect_identifiers('t') "
                                            "WHERE kind IS NOT NULL").fetchall()}
    assert {"id", "pid"} <= found


def test_a_pattern_release_keeps_the_bytes_of_its_sensitive_column(db, source):
    """The pattern walk reads its numeric columns alone: the sensitive column's bytes go from the
    source to the release in SQL, each row's as it was."""
    rel = db.execute("SELECT anon.pattern_view('t', ARRAY['m'], sensitive => ARRAY['g'], seed => 1, "
                     "release_schema => 'rel', release_name => 'walked')").fetchone()[0]
    rel = text(rel)
    released, source_bytes = (db.execute(
        f"SELECT array_agg(convert_to(g, 'SQL_ASCII') ORDER BY convert_to(g, 'SQL_ASCII')) FROM {r}"
    ).fetchone()[0] for r in (rel, "t"))
    assert released == source_bytes
    assert {bytes(b) for b in released} >= {b"caf\xe9", b"\x80", b"\xff\xfe"}


@pytest.mark.parametrize("layout", ["compact", "flat"])
def test_a_refresh_after_such_bytes_arrive_is_refused_and_keeps_the_release(db, layout):
    table = f"later_{layout}"
    db.execute(f"CREATE TABLE {table} AS SELECT i AS id, i % 40 AS n, 'w' || i % 7 AS w, "
               "'s' || i % 3 AS s FROM generate_series(1, 600) i")
    rel = db.execute(f"SELECT anon.mondrian_view('{table}', 5, quasi_identifiers => ARRAY['n', 'w'], "
                     f"sensitive => ARRAY['s'], layout => '{layout}', release_schema => 'rel')"
                     ).fetchone()[0]
    rel = text(rel)
    before = db.execute(f"SELECT count(*), array_agg(r::text ORDER BY r::text) FROM {rel} r").fetchone()
    db.execute(f"UPDATE {table} SET w = convert_from('\\x80'::bytea, 'SQL_ASCII') WHERE id = 17")
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert caught.value.sqlstate == "22021" and 'column "w"' in str(caught.value)
    assert caught.value.diag.message_hint
    # the plain REFRESH runs the same run through the view's query
    views = db.execute("SELECT format('%%I.%%I', schemaname, matviewname) FROM pg_matviews "
                       "WHERE schemaname = 'rel' AND matviewname LIKE %s", (f"{table}%",)).fetchall()
    assert views
    for (view,) in views:
        with pytest.raises(psycopg.Error) as caught:
            db.execute(f"REFRESH MATERIALIZED VIEW {text(view)}")
        assert caught.value.sqlstate == "22021" and 'column "w"' in str(caught.value)
    assert db.execute(f"SELECT count(*), array_agg(r::text ORDER BY r::text) FROM {rel} r").fetchone() == before
    assert min(class_sizes(db, rel, ["n", "w"])) >= 5


def test_the_hints_recoding_of_latin1_bytes_makes_a_truthful_release(db):
    """The hint's UPDATE (the bytes read as LATIN1, written as UTF-8), then the release: every
    row's recoded text in its class's set, k held."""
    table_of_bytes(db, "recoded")
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT anon.mondrian_view('recoded', 5, quasi_identifiers => ARRAY['n', 'w'], "
                   "sensitive => ARRAY['s'], release_schema => 'rel')")
    recode = caught.value.diag.message_hint.split("UPDATE ... SET ")[1].split("), leave")[0]
    db.execute("CREATE TABLE original AS SELECT id, convert_to(w, 'SQL_ASCII') AS w FROM recoded")
    db.execute(f"UPDATE recoded SET {recode}")
    assert db.execute("SELECT count(*) FROM recoded r JOIN original o USING (id) WHERE "
                      "convert_to(r.w, 'SQL_ASCII') <> convert(o.w, 'LATIN1', 'UTF8')").fetchone()[0] == 0
    rel = db.execute("SELECT anon.mondrian_view('recoded', 5, quasi_identifiers => ARRAY['n', 'w'], "
                     "sensitive => ARRAY['id', 's'], release_schema => 'rel')").fetchone()[0]
    rel = text(rel)
    outside = db.execute(f"""
        SELECT count(*) FROM {rel} r RIGHT JOIN recoded t USING (id)
        WHERE r.id IS NULL OR NOT (r.n @> t.n AND convert_to(t.w, 'SQL_ASCII') = ANY (
            SELECT convert_to(u, 'SQL_ASCII') FROM unnest(r.w) u))""").fetchone()[0]
    assert outside == 0
    assert min(class_sizes(db, rel, ["n", "w"])) >= 5


@examples(default=6, slow=30)
@example([b"caf\xc3\xa9", b""])
@example([b"a", b"\xed\xa0\x80"])              # a surrogate's UTF-8 form: no UTF-8
@example([b"\xf4\x90\x80\x80"])                # past U+10FFFF
@given(st.lists(st.binary(min_size=0, max_size=4).filter(lambda b: b"\x00" not in b),
                min_size=1, max_size=6))
def test_a_release_is_refused_exactly_when_a_value_is_not_utf8(db, values):
    """PostgreSQL's UTF-8 check and Python's strict decoding agree: refused iff a value is not
    UTF-8 (surrogates and code points past U+10FFFF included), released otherwise."""
    db.execute("SELECT anon.drop_release('rel.drawn_rel', if_exists => true)")
    db.execute("DROP TABLE IF EXISTS drawn")
    db.execute("CREATE TABLE drawn (id int, n int, w text)")
    db.execute(f"INSERT INTO drawn SELECT i, i %% 3, {BYTES} FROM generate_series(1, 12) i",
               ([v.hex() for v in values], len(values)))

    def utf8(value: bytes) -> bool:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    call = ("SELECT anon.mondrian_view('drawn', 2, quasi_identifiers => ARRAY['n', 'w'], "
            "sensitive => ARRAY['id'], release_schema => 'rel', release_name => 'drawn_rel', "
            "replace => true)")
    if all(utf8(v) for v in values):
        rel = text(db.execute(call).fetchone()[0])
        assert min(class_sizes(db, rel, ["n", "w"])) >= 2
    else:
        refused(db, call, "w", "drawn_rel")



# ---------------------------------------------------------------------------- fusion and trust

@pytest.fixture(scope="module")
def facts(db, source):
    """Auxiliary tables of the fusion attack on t's identifier pid: ``facts`` with plain titles,
    ``facts_of_bytes`` with VALUES' bytes as titles."""
    db.execute("CREATE TABLE facts AS SELECT pid, CASE WHEN id % 2 = 0 THEN 'manager' ELSE "
               "'clerk' END AS title, m AS holdings FROM t WHERE id % 3 = 0")
    db.execute("CREATE TABLE facts_of_bytes AS SELECT pid, w AS title, m AS holdings FROM t "
               "WHERE id % 3 = 0")


def fusion_arguments(identifier: str, auxiliary: str) -> str:
    return (f"sensitive => 'id', identifier => '{identifier}', auxiliary => '{auxiliary}', "
            "auxiliary_identifier => 'pid', attributes => ARRAY['n', 'm'], k_from => 2, k_to => 4, "
            "repeats => 1")


#: (identifier of t, auxiliary table, the column named, the table named)
FUSION_BYTES = [("w", "facts", "w", "public.t"),
                ("pid", "facts_of_bytes", "title", "public.facts_of_bytes")]


@pytest.mark.parametrize("identifier, auxiliary, column, table", FUSION_BYTES)
def test_the_fusion_scan_refuses_bytes_that_are_not_utf8_clearly(db, facts, identifier, auxiliary,
                                                                  column, table):
    """The scan reads the source's identifier and the auxiliary table's texts: refused before it
    reads either, naming the column and its table."""
    error = refused(db, f"SELECT * FROM anon.fusion_scan('t', {fusion_arguments(identifier, auxiliary)})",
                    column, "scanned")
    assert table in error.diag.message_primary, str(error)


@pytest.mark.parametrize("identifier, auxiliary, column, table", FUSION_BYTES)
def test_a_fusion_release_refuses_bytes_that_are_not_utf8_clearly(db, facts, identifier,
                                                                   auxiliary, column, table):
    name = f"fusion_{column}"
    error = refused(db, f"SELECT anon.fusion_resilient_view('t', {fusion_arguments(identifier, auxiliary)}, "
                        f"release_schema => 'rel', release_name => '{name}')", column, name)
    assert table in error.diag.message_primary, str(error)


def test_a_fusion_refresh_after_such_bytes_arrive_is_refused_and_keeps_the_release(db, facts):
    """The run reads the identifier it releases: refused on refresh once a value is not UTF-8."""
    db.execute("CREATE TABLE later_fusion AS SELECT id, pid, n, m FROM t")
    rel = text(db.execute(f"SELECT anon.fusion_resilient_view('later_fusion', "
                          f"{fusion_arguments('pid', 'facts')}, release_schema => 'rel')"
                          ).fetchone()[0])
    before = db.execute(f"SELECT count(*), array_agg(r::text ORDER BY r::text) FROM {rel} r").fetchone()
    assert before[0] == db.execute("SELECT count(*) FROM later_fusion").fetchone()[0]
    db.execute("UPDATE later_fusion SET pid = convert_from('\\x80'::bytea, 'SQL_ASCII') WHERE id = 17")
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert caught.value.sqlstate == "22021" and 'column "pid"' in str(caught.value)
    assert caught.value.diag.message_hint
    assert db.execute(f"SELECT count(*), array_agg(r::text ORDER BY r::text) FROM {rel} r").fetchone() == before
    assert min(class_sizes(db, rel, ["n", "m"])) >= 2


@pytest.fixture(scope="module")
def requester(db):
    role = f"sql_ascii_requester_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE ROLE {role}")
    db.execute("SELECT anon.add_requester('reader', role => %s)", (role,))
    db.execute("SELECT anon.record_interaction('reader', outcome => 'good')")
    db.execute("""SELECT anon.define_purpose('study', priorities => '{"n": 1, "w": 0.5}')""")
    yield "reader"
    db.execute(f"DROP OWNED BY {role}")
    db.execute(f"DROP ROLE {role}")


def test_a_trust_release_refuses_a_quasi_identifier_of_such_bytes(db, source, requester):
    refused(db, "SELECT anon.trust_view('t', requester => 'reader', purpose => 'study', "
                "quasi_identifiers => ARRAY['n', 'w'], sensitive => ARRAY['s'], "
                "release_schema => 'rel', release_name => 'trusted_w')", "w", "trusted_w")


def test_a_trust_release_keeps_the_bytes_of_its_sensitive_column(db, source, requester):
    """The trust run reads its QIs alone: the sensitive column's bytes go from the source to the
    release in SQL, each row's as it was."""
    rel = text(db.execute("SELECT anon.trust_view('t', requester => 'reader', purpose => 'study', "
                          "quasi_identifiers => ARRAY['n'], sensitive => ARRAY['g'], "
                          "max_suppression => 0, release_schema => 'rel', "
                          "release_name => 'trusted_g')").fetchone()[0])
    released, source_bytes = (db.execute(
        f"SELECT array_agg(convert_to(g, 'SQL_ASCII') ORDER BY convert_to(g, 'SQL_ASCII')) FROM {r}"
    ).fetchone()[0] for r in (rel, "t"))
    assert released == source_bytes
    assert {bytes(b) for b in released} >= {b"caf\xe9", b"\x80", b"\xff\xfe"}


def test_a_purpose_derived_from_such_bytes_is_refused_clearly(db, source):
    """anon.define_purpose(derive_from => ...) reads the table's QIs and sensitive columns."""
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT anon.define_purpose('derived', derive_from => 't', most_useful => 'n', "
                   "least_useful => 'm')")
    error = caught.value
    assert error.sqlstate == "22021", str(error)
    assert 'column "w"' in error.diag.message_primary and error.diag.message_hint, str(error)
    assert db.execute("SELECT count(*) FROM anon.purposes WHERE purpose_name = 'derived'"
                      ).fetchone()[0] == 0
