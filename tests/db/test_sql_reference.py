"""docs/sql-reference.md documents every user-facing function of schema anon: the generated
PL/Python ones and those written by hand in SQL/PL/pgSQL (e.g. anon.add_queries)."""
from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_build import load_build

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_function_of_schema_anon_is_in_the_reference(db):
    functions = {r[0] for r in db.execute("""
        SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'anon' AND p.proname !~ '^_'""").fetchall()}
    documented = set(re.findall(r"^### anon\.(\w+)$", load_build().reference(), re.MULTILINE))
    assert {"add_queries", "drop_hierarchy", "mondrian_view"} <= functions
    assert functions - documented == set(), "functions missing from docs/sql-reference.md"
    assert documented - functions == set(), "the reference documents functions that do not exist"
