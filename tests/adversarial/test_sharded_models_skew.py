"""Adversarial: out-of-core models (entropy and recursive l, t-closeness) on a source sharded
through postgres_fdw, cut level by level on the shards' counts per sensitive value, where the
shards disagree: one shard empty; a sensitive value (holding quotes, a comma, 0x01) and every
NULL of it on one shard only; a float8 sensitive column whose values' shortest texts differ
from what a session with extra_float_digits = 0 prints. Checked from the released rows: every
row once, inside its class's ranges and sets, k, and the model in every class."""
from __future__ import annotations

import psycopg
import pytest

from tests.db.test_out_of_core import (  # noqa: F401  (shards: the fixture)
    QIS,
    assert_l_diversity_holds,
    budget,
    catalog,
    check_release,
    release_models,
    release_t,
    sharded_table,
    shards,
    synthetic_shard,
    worst_equal_emd,
    worst_ordered_emd,
)
from tests.helpers import class_sizes

COLUMNS = "id int, a int, b text, d float8, s text, w float8"


def empty_second(conn, i):
    """Every row on shard 0 (ids odd and even), none on shard 1."""
    if i == 0:
        for parity in (0, 1):
            synthetic_shard(conn, parity)
    conn.execute("UPDATE part SET w = (id % 30) * 0.1")


def lopsided(conn, i):
    """Shard 1 alone holds the value 'rare, "q"\x01' and every NULL of s."""
    synthetic_shard(conn, i)
    conn.execute("UPDATE part SET w = (id % 30) * 0.1")
    if i == 1:
        conn.execute("""UPDATE part SET s = CASE id % 5 WHEN 1 THEN E'rare, "q"\\x01'
                        WHEN 3 THEN NULL ELSE s END""")
    else:
        conn.execute("UPDATE part SET s = 'flu' WHERE s IS NULL")


def check_model(db, rel, model, k):
    assert min(class_sizes(db, rel, QIS)) >= k
    if "t" in model:
        assert worst_equal_emd(db, rel) <= model["t"] + 1e-9
    assert_l_diversity_holds(db, rel, model)


@pytest.mark.parametrize("fill", [empty_second, lopsided], ids=["empty shard", "lopsided"])
@pytest.mark.parametrize("model", [{"l": 2, "l_diversity": "entropy"},
                                   {"l": 2, "l_diversity": "recursive", "c": 3}, {"t": 0.25}],
                         ids=["entropy", "recursive", "t"])
def test_models_hold_on_shards_that_disagree(db, schema, shards, fill, model):  # noqa: F811
    with sharded_table(db, schema, shards, COLUMNS, fill) as table, budget(db, "64kB"):
        try:
            rel = release_models(db, schema, table, "ooc", 5, dict(model))
        except (psycopg.errors.DataException, psycopg.errors.InvalidParameterValue) as refused:
            pytest.fail(f"refused: {refused}")
        metrics, verified, row_count, _ = catalog(db, rel)
        assert metrics["out_of_core"]["regions"] > 2 and verified is True and row_count == 3000
        if "t" in model:
            assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 3000
        else:
            check_release(db, rel, table, 5, 2)
        check_model(db, rel, model, 5)


@pytest.mark.parametrize("fill", [empty_second, lopsided], ids=["empty shard", "lopsided"])
def test_t_of_float_values_counted_on_shards_holds_and_rounding_sessions_are_refused(db, schema, shards, fill):  # noqa: F811
    """The shards print a float8 with its shortest exact digits (postgres_fdw's sessions set
    extra_float_digits = 3); a builder's session that would print 0.30000000000000004 as 0.3
    is refused, and the default one releases t from values counted on the shards."""
    with sharded_table(db, schema, shards, COLUMNS, fill) as table, budget(db, "64kB"):
        db.execute("SET extra_float_digits = 0")
        try:
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="extra_float_digits"):
                release_t(db, schema, table, "rounded", 0.2)
        finally:
            db.execute("RESET extra_float_digits")
        rel = release_t(db, schema, table, "ooc", 0.2)
        metrics, verified, row_count, _ = catalog(db, rel)
        assert metrics["out_of_core"]["regions"] > 2 and verified is True and row_count == 3000
        assert min(class_sizes(db, rel, QIS)) >= 5
        assert worst_ordered_emd(db, rel, "w") <= 0.2 + 1e-9
