"""Adversarial: in-memory Mondrian releases of extreme numbers and times (int8's limits, 23-digit
numerics, NaN, +-infinity, NULL) and edge dates, on the compact layout (each class's ranges
stored as literals packed one text per column) and the flat one. Checked from the released
rows: every row once, inside its class's ranges, classes of k rows and l distinct values."""
from __future__ import annotations

import pytest

from tests.adversarial.test_out_of_core_extremes import EXTREMES
from tests.helpers import class_sizes, create_release, distinct_sensitive_per_class

QIS = ["a", "f", "d", "ts", "dt"]


@pytest.mark.parametrize("layout", ["compact", "flat"])
def test_extreme_values_are_released_truthfully_in_memory_on_either_layout(db, schema, layout):
    db.execute("CREATE TABLE extremes (id int, a int8, f float8, d numeric, ts timestamp, s text)")
    db.execute(EXTREMES)
    db.execute("""ALTER TABLE extremes ADD COLUMN dt date;
                  UPDATE extremes SET dt = (ARRAY[date 'infinity', date '-infinity', NULL,
                      date '4713-01-01 BC', date '5874897-12-31', date '2000-01-01'])[1 + id % 6]""")
    rel = create_release(db, "mondrian_view", schema, "extremes", k=3, l=2, quasi_identifiers=QIS,
                         sensitive=["id", "s"], layout=layout)
    assert db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (300, 300)
    outside = db.execute(f"""
        SELECT count(*) FROM {rel} r JOIN extremes t USING (id)
        WHERE NOT ((t.a IS NULL OR r.a @> t.a) AND (t.f IS NULL OR r.f @> t.f::text::numeric)
                   AND (t.d IS NULL OR r.d @> t.d) AND (t.ts IS NULL OR r.ts @> t.ts)
                   AND (t.dt IS NULL OR r.dt @> t.dt))""").fetchone()[0]
    assert outside == 0
    assert min(class_sizes(db, rel, QIS)) >= 3
    assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= 2
