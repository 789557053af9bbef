"""The release methods under contract: one entry per function that publishes a release in
``anon.releases``, each knowing how to release the shared fixture table and where its released
quasi-identifiers are. The checks (test_contract.py) are written once against this table, like
scikit-learn's ``parametrize_with_checks``: a new method adds an entry here and gets every check."""
from __future__ import annotations

from dataclasses import dataclass, field

from psycopg import sql

# The fixture table: numeric (age, hours) and categorical (sex, job) quasi-identifiers, one
# sensitive column (salary, declared) and one identifier (id, the primary key). Rows i in
# [lo, hi] are given by a formula, so a refresh test can insert more of the same population.
N_ROWS = 400
ROWS = """
INSERT INTO {table}
SELECT i, 18 + (i * 37) % 60, 20 + (i * 13) % 40, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (ARRAY['nurse', 'doctor', 'clerk', 'cashier'])[1 + (i * 7) % 4],
       20000 + 5000 * ((i * 11) % 6)
FROM generate_series({lo}, {hi}) i"""
TABLE = """
CREATE TABLE {table} (id int PRIMARY KEY, age int NOT NULL, hours int NOT NULL,
                      sex text NOT NULL, job text NOT NULL, salary int NOT NULL);
{rows};
SELECT anon.set_column_role('{table}', 'salary', 'sensitive');
SELECT anon.set_hierarchy('{table}', 'job', ARRAY[
    ARRAY['nurse', 'health', '*'], ARRAY['doctor', 'health', '*'],
    ARRAY['clerk', 'office', '*'], ARRAY['cashier', 'office', '*']]);
"""
# Fusion's auxiliary data: what an attacker knows about (most of) the same people, here noise.
AUXILIARY = """
CREATE TABLE {table}_aux (id int, holdings float8);
INSERT INTO {table}_aux SELECT i, ((i * 7919) % 1000)::float8 FROM generate_series(1, {n}) i
WHERE i % 5 <> 0;
"""
QIS = ["age", "hours", "sex", "job"]
NUMERIC_QIS = ["age", "hours"]


def create_table(db, table: str, n: int = N_ROWS) -> str:
    db.execute(TABLE.format(table=table, rows=ROWS.format(table=table, lo=1, hi=n)))
    db.execute(AUXILIARY.format(table=table, n=n))
    return table


def insert_rows(db, table: str, lo: int, hi: int) -> None:
    db.execute(ROWS.format(table=table, lo=lo, hi=hi))


@dataclass
class Context:
    """What some methods need beyond the source: trust_view's requester and purpose."""
    requester: str
    purpose: str


@dataclass(frozen=True)
class Method:
    name: str
    function: str
    fixed: dict = field(default_factory=dict)   # named arguments every call passes
    k_arg: str | None = "k"                    # the argument carrying k; None: k not offered
    no_k: str = ""                             # why, when k is not offered
    l_arg: str | None = None                   # the argument carrying l; None: l not offered
    no_l: str = ""
    qi_columns: tuple = tuple(QIS)             # released quasi-identifier columns
    qi_suffix: str = ""                        # relation of the QIs: release name + suffix
    published_suffixes: tuple = ("",)          # every relation the release publishes
    storage_suffix: str = ""                   # its materialized view: release name + suffix
    values: str = "generalized"                # generalized | microaggregated | substituted
    reader: str = "analyst"                    # analyst (grant_analyst) | requester (trust)

    def arguments(self, ctx: Context | None, source: str, k, l=None) -> dict:
        args = {}
        if self.name == "fusion_resilient_view":
            # k is k_from; k_to stays small (a short scan) even when k_from is NULL or bad
            args.update(auxiliary=f"{source}_aux", k_from=k, k_to=(k or 5) + 3)
        elif self.name == "trust_view":
            args.update(requester=ctx.requester, purpose=ctx.purpose, k=k)
        elif self.k_arg:
            args[self.k_arg] = k
        if l is not None and self.l_arg:
            args[self.l_arg] = l
        return {**self.fixed, **args}

    def call(self, ctx: Context | None, source: str, k_value, l_value=None,
             **options) -> sql.Composed:
        """SELECT anon.<function>(source, ...) with every argument named and literal; options
        add or override arguments."""
        args = {**self.arguments(ctx, source, k_value, l_value), **options}
        def cast(name, value):
            return "::text[]" if isinstance(value, list) else "::jsonb" if name == "priorities" else ""
        parts = [sql.SQL("{} => {}{}").format(sql.Identifier(n), sql.Literal(v), sql.SQL(cast(n, v)))
                 for n, v in args.items()]
        return sql.SQL("SELECT anon.{}({}::regclass, {})").format(
            sql.Identifier(self.function), sql.Literal(source), sql.SQL(", ").join(parts))

    def create(self, db, ctx, source, k_value, l_value=None, **options) -> str:
        return db.execute(self.call(ctx, source, k_value, l_value, **options)).fetchone()[0]


METHODS = [
    Method("mondrian_view", "mondrian_view", l_arg="l",
           fixed={"quasi_identifiers": QIS, "sensitive": ["salary"]}),
    # the compact layout: a view over one stored row per class
    Method("mondrian_view_compact", "mondrian_view", l_arg="l",
           fixed={"quasi_identifiers": QIS, "sensitive": ["salary"], "layout": "compact"},
           storage_suffix="_classes"),
    Method("prioritized_mondrian_view", "mondrian_view", l_arg="l",
           fixed={"priorities": '{"age": 1, "job": 0.2}', "quasi_identifiers": QIS,
                  "sensitive": ["salary"]}),
    Method("break_merge", "break_merge", l_arg="l",
           fixed={"quasi_identifiers": QIS, "sensitive": ["salary"], "identifiers": ["id"]},
           qi_suffix="_qit", published_suffixes=("_qit", "_merged", "_st_salary")),
    Method("trust_view", "trust_view",
           no_l="trust_view has no l argument: the sensitive column is released as is, only k "
                "(optional) is promised",
           fixed={"quasi_identifiers": QIS, "sensitive": ["salary"], "gamma": 1, "d_min": 0.3,
                  "d_max": 0.3},
           reader="requester"),
    Method("pattern_view", "pattern_view", k_arg=None,
           no_k="pattern_view offers no k (docs/pattern.md: 'no formal privacy guarantee (no k, "
                "no e)'); what it promises is that values move: at most max_unchanged of each "
                "substituted column released unchanged, and no identifier published",
           no_l="pattern_view keeps sensitive columns as they are; no l",
           fixed={"columns": NUMERIC_QIS, "sensitive": ["salary"], "seed": 7},
           qi_columns=tuple(NUMERIC_QIS), values="substituted"),
    Method("fusion_resilient_view", "fusion_resilient_view",
           no_l="fusion suppresses the sensitive column: no l applies",
           # one simulation per k: the contract is the release's life, not the attack's statistics
           fixed={"sensitive": "salary", "identifier": "id", "attributes": NUMERIC_QIS, "repeats": 1},
           qi_columns=tuple(NUMERIC_QIS), values="microaggregated"),
    # a plug-in: declared in sql/functions alone (120-mdav.toml)
    Method("mdav_view", "mdav_view", no_l="mdav_view promises k only",
           fixed={"quasi_identifiers": NUMERIC_QIS, "sensitive": ["salary"]},
           qi_columns=tuple(NUMERIC_QIS)),
    # a method from outside the package (random_groups.py; conftest.py installs it)
    Method("random_groups_view", "random_groups_view",
           no_l="random groups promise k only", fixed={"quasi_identifiers": QIS, "sensitive": ["salary"]}),
]
BY_NAME = {m.name: m for m in METHODS}
