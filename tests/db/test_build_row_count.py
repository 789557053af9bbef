"""Whether a build counts its source's rows before choosing to read it in memory or out of core
(plpy_anon/db/out_of_core.py, ``sized``): a count(*) costs a tenth of a copy, and a source whose
pages cannot hold more rows than the budget takes needs none. The statements a build runs are
seen through auto_explain; the releases are checked from their rows."""
from __future__ import annotations

import contextlib

from tests.db.test_out_of_core import budget, catalog, check_release, release, synthetic
from tests.helpers import notices

COUNT = "Query Text: SELECT count(*) AS n FROM "


@contextlib.contextmanager
def statements_seen(db):
    """The plans of every statement the block runs, nested ones too (auto_explain notices)."""
    db.execute("LOAD 'auto_explain'")
    seen = notices(db)
    for setting, value in [("auto_explain.log_min_duration", "0"),
                           ("auto_explain.log_nested_statements", "on"),
                           ("auto_explain.log_level", "notice")]:
        db.execute("SELECT set_config(%s, %s, false)", (setting, value))
    try:
        yield seen
    finally:
        db.execute("RESET auto_explain.log_min_duration")
        db.execute("RESET auto_explain.log_nested_statements")
        db.execute("RESET auto_explain.log_level")


def test_source_whose_pages_cannot_hold_more_than_the_budget_is_read_without_a_count(db, schema):
    synthetic(db, "src", 500)
    with statements_seen(db) as seen:
        rel = release(db, schema, "src", "mem", k=5, l=2)
    assert not [plan for plan in seen if COUNT in plan], [p for p in seen if COUNT in p][:1]
    metrics, verified, row_count, _ = catalog(db, rel)
    assert "out_of_core" not in metrics and verified is True and row_count == 500
    check_release(db, rel, "src", 5, 2)


def test_source_whose_pages_could_hold_more_than_the_budget_is_counted_and_read_in_memory(
        db, schema):
    """Deleted rows keep their pages: 3,000 rows' pages bound the rows far above a budget that
    the 300 left fit in; they are counted, then read in memory, every one released."""
    synthetic(db, "src", 3000)
    db.execute("DELETE FROM src WHERE id % 10 <> 0")     # rows left on every page: none truncated
    with budget(db, "100kB"), statements_seen(db) as seen:  # 300 rows x 5 columns: ~46 kB
        rel = release(db, schema, "src", "counted", k=5, l=2)
    assert [plan for plan in seen if COUNT in plan]
    metrics, verified, row_count, _ = catalog(db, rel)
    assert "out_of_core" not in metrics and verified is True and row_count == 300
    check_release(db, rel, "src", 5, 2)
