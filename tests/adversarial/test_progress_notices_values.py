"""Adversarial probe that found nothing, kept: the progress notices (SET plpy_anon.progress = on)
of builds and refreshes, in memory and out of core, stable region by region included, and of a
refresh that fails on a value, say phases and counts, never a value of the source. The messages
of failures also go to anon.refresh_history and anon.releases.last_error, which every custodian
reads: the value outside a hierarchy stays in the error's detail, shown to the caller alone, and
no catalog, status or audit row another custodian reads holds a value (the stable mode, which
takes no hierarchy, fails on the budget instead).

Every value of the source is distinctive (ages 987001 and up, zip and diagnosis texts that no
message holds by chance), so a notice or row quoting one is seen."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import notices, release_schema_of

#: every value of the source is one of these: a notice quoting any would show
AGES = [987_001 + 7 * i for i in range(40)]
ZIPS = [f"zq{i:02d}secret" for i in range(12)]
DX = ["dx_hiv_x", "dx_flu_x", "dx_ok_x"]
NEW_ZIP = "zq99unheardof"


def values_in(messages: list[str]) -> list[tuple[str, str]]:
    texts = [str(a) for a in AGES] + ZIPS + DX + [NEW_ZIP]
    return [(t, m) for m in messages for t in texts if t in m]


@pytest.mark.parametrize("memory,mode", [(None, "fresh"), ("1", "fresh"), ("1", "stable")])
def test_progress_notices_show_no_value_of_the_source(db, schema, connect, memory, mode):
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, zip text, dx text)")
    db.execute("INSERT INTO pt SELECT g, (%s::int[])[1 + g %% 40], (%s::text[])[1 + (g * 7) %% 12], "
               "(%s::text[])[1 + g %% 3] FROM generate_series(1, 3000) g", (AGES, ZIPS, DX))
    if mode == "fresh":       # the stable mode takes no hierarchy: its refresh fails on the budget
        db.execute("SELECT anon.set_hierarchy_csv('pt', 'zip', %s)",
                   ("".join(f"{z};{z[:3]};*\n" for z in ZIPS),))
    with connect() as c:
        c.execute(f'SET search_path = "{schema}"')
        c.execute("SET plpy_anon.progress = on")
        if memory:
            c.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
        seen = notices(c)
        release = c.execute(
            "SELECT anon.mondrian_view('pt', k => 5, l => 2, quasi_identifiers => ARRAY['age', 'zip'], "
            "sensitive => ARRAY['dx'], identifiers => ARRAY['id'], refresh_mode => %s, "
            "release_schema => %s)::text", (mode, release_schema_of(schema))).fetchone()[0]
        assert any("region" in m for m in seen) is bool(memory), seen
        c.execute("RESET plpy_anon.build_memory")
        c.execute("SELECT anon.refresh(%s)", (release,))
        c.execute("INSERT INTO pt VALUES (5000, %s, %s, 'dx_ok_x')", (AGES[0], NEW_ZIP))
        if mode == "stable":
            c.execute("SET plpy_anon.build_memory = '1'")
        with pytest.raises(psycopg.Error) as failed:
            c.execute("SELECT anon.refresh(%s)", (release,))
    if mode == "fresh":       # the caller's own error names the value outside the hierarchy
        assert NEW_ZIP in failed.value.diag.message_detail
    assert len(seen) > 5 and any(m.startswith("plpy_anon: failed") for m in seen), seen
    assert not values_in(seen)
    recorded = db.execute("SELECT r.last_error, h.error FROM anon.releases r JOIN anon.refresh_history h "
                          "USING (release_id) WHERE NOT h.succeeded AND format('%%I.%%I', r.release_schema, "
                          "r.release_name) = %s", (release,)).fetchall()
    assert recorded and all(recorded[0]) and not values_in([m for row in recorded for m in row])
    # what another custodian reads of the release: whole catalog rows, and the audit
    role = f"spy_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(sql.Identifier(role)))
    try:
        with connect(user=role) as spy:
            read = [r[0] for q in ("SELECT r::text FROM anon.releases r", "SELECT h::text FROM anon.refresh_history h",
                                   "SELECT a::text FROM anon.release_audit() a",
                                   "SELECT s::text FROM anon.release_status() s")
                    for r in spy.execute(q).fetchall()]
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    assert any(release in text for text in read) and not values_in(read)
