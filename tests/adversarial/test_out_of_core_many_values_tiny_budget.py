"""Adversarial: out of core at a tiny budget (its order_values stays ORDER_VALUES), a categorical
QI of more than 50,000 distinct values (quotes and commas in each, NULLs, one value holding
the remaining rows) under quoted mixed-case names: its order is not read, so the top cuts go by
the other QI or by none. Checked from the released rows: every row once inside its class's set and range,
every set exactly its class's values, k and l."""
from __future__ import annotations

from tests.helpers import release_schema_of

DISTINCT = 51_000
ROWS = 56_000


def test_a_categorical_qi_over_order_values_at_a_tiny_budget_is_released_truthfully(
        db, schema, connect):
    # rows 1..51,000: each its own value (NULL every 97th); the rest: one value
    db.execute(f"""CREATE TABLE "Wide" ("Id" int, "Zip Code" text, "Yr" int, "Diag" text);
        INSERT INTO "Wide" SELECT i,
            CASE WHEN i % 97 = 0 THEN NULL WHEN i <= {DISTINCT} THEN 'z,"' || i ELSE 'Bulk' END,
            i % 7, 'd' || i % 4 FROM generate_series(1, {ROWS}) i""")
    with connect(options=f"-c search_path={schema}") as conn:
        conn.execute("SET plpy_anon.build_memory = '256kB'")
        rel = conn.execute("SELECT anon.mondrian_view('\"Wide\"', 4, l => 2, quasi_identifiers => "
                           "ARRAY['Zip Code', 'Yr'], sensitive => ARRAY['Id', 'Diag'], "
                           "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
        ooc = conn.execute("SELECT metrics->'out_of_core' FROM anon.releases WHERE "
                           "format('%%I.%%I', release_schema, release_name) = %s", (rel,)).fetchone()[0]
        assert ooc is not None and ooc["regions"] > 1, ooc
        assert conn.execute(f'SELECT count(*), count(DISTINCT "Id") FROM {rel}').fetchone() == (ROWS, ROWS)
        outside = conn.execute(f"""
            SELECT count(*) FROM {rel} r JOIN "Wide" t USING ("Id")
            WHERE NOT (r."Yr" @> t."Yr" AND r."Diag" = t."Diag"
                       AND EXISTS (SELECT 1 FROM unnest(r."Zip Code") u
                                   WHERE u IS NOT DISTINCT FROM t."Zip Code"))""").fetchone()[0]
        assert outside == 0
        unequal = conn.execute(f"""
            SELECT count(*) FROM (
                SELECT r."Zip Code" AS w, count(DISTINCT coalesce(t."Zip Code", E'\\x01N')) AS held
                FROM {rel} r JOIN "Wide" t USING ("Id") GROUP BY r."Yr", r."Zip Code") c
            WHERE cardinality(c.w) <> c.held""").fetchone()[0]
        assert unequal == 0
        sizes = conn.execute(f'SELECT min(n), min(d) FROM (SELECT count(*) n, count(DISTINCT "Diag") d '
                             f'FROM {rel} GROUP BY "Yr", "Zip Code") c').fetchone()
        assert sizes[0] >= 4 and sizes[1] >= 2
