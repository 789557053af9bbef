"""Attribute the columns a statement uses to the real tables, with the clause of each use.

The statement is first qualified by sqlglot against the catalog (``qualify`` expands ``*``,
resolves aliases and prefixes every column with its source), then each scope is walked:

* a column whose source is a real table (``exp.Table``) is attributed to ``(schema, table)``;
* a column whose source is a CTE or derived table is followed into that scope's projection of
  the same name, and every column in that projection inherits the *outer* use's clause
  (``WHERE c.age > 5`` over ``WITH c AS (SELECT p.age ...)`` is a selection on ``patients.age``);
* projections of CTEs and derived tables are not uses by themselves: they only count through the
  outer query that reads them (an unread CTE column is not a use);
* a subquery in an expression (``WHERE id IN (SELECT pid ...)``) passes the clause it sits in to
  its own projection (``pid`` is used for selection there);
* functions and expressions over columns count each column inside them
  (``extract(year from birth_date)`` counts ``birth_date``).

Clauses: ``projection`` (SELECT list), ``selection`` (WHERE, JOIN ... ON, HAVING),
``group_by``, ``order_by``. Each ``(column, clause)`` counts once per statement.

Predicates: every atomic comparison of a column with constants in a selection clause is kept as a
:class:`~plpy_anon.core.workload.Condition` whose ``column`` is a :class:`ColumnRef`. Rules:
``col op const`` and ``const op col`` for ``= <> < <= > >=``; ``BETWEEN``; ``IN (consts)``;
``LIKE 'abc%'`` becomes ``prefix 'abc'`` (a pattern without wildcards becomes ``=``; other
patterns, ``ILIKE``, ``NOT``, ``IS NULL`` and comparisons with ``$n`` placeholders or expressions
carry no constant). The WHERE clauses of the root query, its CTEs and derived tables are combined
with AND into one predicate tree per statement (used for workload precision).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, ScopeType, traverse_scope
from sqlglot.schema import ensure_schema

from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.workload import AllOf, AnyOf, Condition
from plpy_anon.querylog.parse import ASCII_LOWER, DIALECT

PROJECTION, SELECTION, GROUP_BY, ORDER_BY = "projection", "selection", "group_by", "order_by"
CLAUSES = (PROJECTION, SELECTION, GROUP_BY, ORDER_BY)


class ColumnRef(NamedTuple):
    schema: str
    table: str
    column: str

    def __str__(self):
        return f"{self.schema}.{self.table}.{self.column}"


class ColumnUse(NamedTuple):
    ref: ColumnRef
    clause: str


class ResolveError(Exception):
    """The statement does not resolve against the catalog (unknown or ambiguous column)."""


class NotAQuery(Exception):
    """The statement is not a query (DDL, DML, utility): it says nothing about column use."""


@dataclass
class ResolvedStatement:
    tables: frozenset  # {(schema, table)} read by the statement
    uses: frozenset  # {ColumnUse}
    conditions: tuple  # atomic Conditions with ColumnRef columns, in order of appearance
    where: object  # predicate tree (AllOf/AnyOf/Condition) or None


def resolve_statement(expression: exp.Expr, schema: dict, default_schema: str = "public"):
    """Resolve one parsed statement against ``schema`` ({schema: {table: {column: type}}})."""
    return resolve_shape(expression, schema, default_schema).bind({})


def resolve_shape(expression: exp.Expr, schema: dict, default_schema: str = "public"):
    """Qualify and walk ``expression`` once: a :class:`ResolvedShape` whose :meth:`~ResolvedShape.bind`
    gives the :class:`ResolvedStatement` of any statement of the same shape from its literals."""
    if not isinstance(expression, exp.Query):
        raise NotAQuery(f"{type(expression).__name__} statement")
    schema = ensure_schema(schema, dialect=DIALECT)        # once per workload by the learner
    single = _qualified_single_table(expression, schema, default_schema)
    if single is not None:
        scopes, literals = single
    else:
        try:
            qualified = qualify(expression, schema=schema, dialect=DIALECT, db=default_schema)
        except SqlglotError as error:
            raise ResolveError(str(error).splitlines()[0]) from error
        except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as error:
            # sqlglot's own assertions on statements it cannot resolve (a star beside an
            # unknown table): unresolved, like its errors
            raise ResolveError(f"not resolvable ({type(error).__name__}: {error})") from error
        try:
            scopes, literals = traverse_scope(qualified), literal_nodes(qualified)
        except RecursionError as error:
            raise ResolveError(f"not resolvable ({type(error).__name__}: {error})") from error
    walker = _ScopeWalker(default_schema)
    try:
        for scope in scopes:
            walker.visit(scope)
    except RecursionError as error:   # subqueries nested deeper than Python's stack
        raise ResolveError(f"not resolvable ({type(error).__name__}: {error})") from error
    return ResolvedShape(walker, scopes, literals)


_NOT_SINGLE_TABLE = (exp.Subquery, exp.With, exp.Join, exp.Lateral, exp.SetOperation,
                     exp.Window, exp.Unnest, exp.Values)


def _subclasses(classes):
    found, pending = set(), list(classes)
    while pending:
        cls = pending.pop()
        if cls not in found:
            found.add(cls)
            pending += cls.__subclasses__()
    return frozenset(found)


# by exact type: a set lookup per node instead of an isinstance over a tuple
_NOT_SINGLE_TABLE_KINDS = _subclasses(_NOT_SINGLE_TABLE)


def _qualified_single_table(expression: exp.Expr, schema, default_schema: str):
    """``([its one scope], its literal nodes)``: ``expression`` qualified as ``qualify`` would, for the statements most workloads are made
    of (qualify costs 60 % of resolving one): a SELECT of one table, without join, subquery, CTE,
    set operation, window, star, positional GROUP/ORDER BY or reference to an output alias, every
    column one of that table's, named bare or by the table's name or alias. None for anything
    else, which ``qualify`` resolves (and ``test_resolve`` checks both give the same uses and
    predicates). One walk collects what the checks, the normalization, the qualification and
    the scope need (walking the tree five times and ``traverse_scope`` took a third of a
    workload's learning time)."""
    if not isinstance(expression, exp.Select):
        return None
    source = expression.args.get("from_")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) \
            or table.args.get("catalog") is not None or table.this.quoted \
            or (isinstance(table.args.get("db"), exp.Identifier) and table.args["db"].quoted) \
            or (table.args.get("alias") is not None and table.args["alias"].columns):
        return None         # quoted names match the catalog exactly, alias(x) renames: qualify's
    selects, found, identifiers, literals = 0, [], [], []
    for node in expression.walk():
        kind = type(node)
        if kind is exp.Identifier:
            identifiers.append(node)
        elif kind is exp.Column:
            found.append(node)
        elif kind is exp.Literal:
            literals.append(node)
        elif kind is exp.Select:
            selects += 1
        elif kind in _NOT_SINGLE_TABLE_KINDS or (
                kind is exp.Star and not isinstance(node.parent, exp.Count)):
            return None
        if node._meta and node._meta.get("case_sensitive"):
            return None  # a /* sqlglot.meta case_sensitive */ comment: qualify's business
    if selects != 1 or _positional(expression, "distinct"):
        return None
    for identifier in identifiers:
        if not identifier.args.get("quoted"):
            identifier.args["this"] = identifier.args["this"].translate(ASCII_LOWER)
    # GROUP BY 1, ORDER BY 1: that output column; checked before the tree is changed, since
    # qualify resolves whatever this path gives up on
    output_names = [select.alias_or_name for select in expression.selects]
    positions = []
    for clause in ("group", "order"):
        for position in _positional(expression, clause):
            number = int(position.this) if position.is_int else 0
            if not 1 <= number <= len(expression.selects):
                return None
            target = expression.selects[number - 1].unalias()
            if not isinstance(target, exp.Column) or output_names.count(target.name) > 1:
                return None
            positions.append((position, target))
    try:
        names = schema.column_names(exp.table_(table.name, db=table.db or default_schema),
                                    dialect=DIALECT)
    except SqlglotError:
        return None
    columns = set(names)
    if not columns:
        return None
    aliases = {select.alias for select in expression.selects if isinstance(select, exp.Alias)}
    qualifier = table.alias_or_name
    for column in found + [target for _, target in positions]:
        if column.args.get("db") is not None or column.name in aliases \
                or column.name not in columns or column.table not in ("", qualifier):
            return None
    starts = _by_start(node for node in literals if not _is_position(node))
    for position, target in positions:
        # a new node, not target.copy(): a deep copy drags the node's metadata along
        column = exp.Column(this=exp.to_identifier(target.name, quoted=target.this.quoted))
        position.replace(column)
        found.append(column)
    for column in found:
        column.set("table", exp.to_identifier(qualifier))
    return [_SingleTableScope(expression, table, found)], starts


class _SingleTableScope:
    """The one scope of a statement :func:`_qualified_single_table` qualified, with what
    :class:`_ScopeWalker` reads of a :class:`~sqlglot.optimizer.scope.Scope`."""

    scope_type = ScopeType.ROOT
    parent = None
    set_operation_scopes = ()

    def __init__(self, select: exp.Select, table: exp.Table, columns: list):
        self.expression = select
        self.sources = {table.alias_or_name: table}
        self.columns = columns


def _positional(select: exp.Select, clause: str) -> list:
    """The literals standing for output columns in a GROUP BY, ORDER BY or DISTINCT ON."""
    node = select.args.get(clause)
    items = [] if node is None else node.expressions if clause != "distinct" else \
        (node.args.get("on").expressions if node.args.get("on") is not None else [])
    items = [item.this if isinstance(item, exp.Ordered) else item for item in items]
    return [item for item in items if isinstance(item, exp.Literal)]


def literal_nodes(expression: exp.Expr) -> dict:
    """``{start offset in the text: [Literal nodes]}`` of the literals that still carry the
    position of their token (a literal that qualification rewrote or built has none), but for
    output positions qualify left in place (``GROUP BY 1`` on a constant): structure, not a
    value another statement of the shape may bind."""
    return _by_start(node for node in expression.find_all(exp.Literal) if not _is_position(node))


def _by_start(literals) -> dict:
    """``{start offset: [nodes]}`` of the literals still carrying their token's position."""
    found: dict = {}
    for node in literals:
        start = node.meta.get("start") if node._meta else None
        if start is not None:
            found.setdefault(start, []).append(node)
    return found


def _is_position(node: exp.Expr) -> bool:
    """A literal standing for an output column: GROUP BY 1, ORDER BY 1, DISTINCT ON (1)."""
    parent = node.parent
    if isinstance(parent, exp.Ordered) and node.arg_key == "this":
        parent = parent.parent
    return isinstance(parent, (exp.Group, exp.Order)) or (
        isinstance(parent, exp.Tuple) and isinstance(parent.parent, exp.Distinct))


class ResolvedShape:
    """A resolved statement whose literal values can be replaced: tables and column uses do not
    depend on literals; predicates are recomputed from the literals bound."""

    def __init__(self, walker, scopes, literals):
        self._literals = literals
        self._plans = [plan for scope in scopes for plan in walker.predicate_plans(scope)]
        self.tables = frozenset(walker.tables)
        self.uses = frozenset(walker.uses)

    def rebindable(self, start, text) -> bool:
        """True when the token at ``start`` reads as ``text`` in the resolved tree, so that
        binding another value there is what parsing that value would have given."""
        nodes = self._literals.get(start)
        return bool(nodes) and all(n.this == text for n in nodes)

    def bind(self, values: dict) -> ResolvedStatement:
        """The statement with the literal at each ``start`` of ``values`` set to its text."""
        for start, text in values.items():
            for node in self._literals.get(start, ()):
                node.args["this"] = text
        conditions, where_trees = [], []
        for plan, combined in self._plans:
            tree = evaluate_plan(plan, conditions)
            if combined:
                where_trees.append(tree)
        return ResolvedStatement(
            tables=self.tables,
            uses=self.uses,
            conditions=tuple(conditions),
            where=_conjunction(where_trees),
        )


def _conjunction(trees):
    trees = [t for t in trees if t is not None]
    if not trees:
        return None
    return trees[0] if len(trees) == 1 else AllOf(tuple(trees))


class _ScopeWalker:
    """Collects tables, column uses and predicates over the scopes of one statement."""

    def __init__(self, default_schema):
        self.default_schema = default_schema
        self.tables = set()
        self.uses = set()
        self._direct = {}  # id(column node) -> direct origin (the tree outlives the walker)

    # -- scopes ---------------------------------------------------------------------------
    def visit(self, scope: Scope):
        check_interrupts()
        for source in scope.sources.values():
            if isinstance(source, exp.Table):
                self.tables.add(self._table_key(source))
        pass_through = _is_pass_through(scope)
        clauses: dict = {}
        for column in _columns_of(scope):
            check_interrupts()
            clause = _clause_in_scope(column, scope, clauses)
            if clause == PROJECTION:
                if pass_through:
                    continue  # counted when an outer query reads this projection
                clause = _projection_clause(scope)
            for ref, _direct in self.origins(scope, column):
                self.uses.add(ColumnUse(ref, clause))

    def _table_key(self, table: exp.Table):
        return (table.db or self.default_schema, table.name)

    # -- attribution ----------------------------------------------------------------------
    def origins(self, scope: Scope, column: exp.Column, seen=frozenset()):
        """Real columns behind ``column``: ``[(ColumnRef, direct)]``; ``direct`` when the value
        reaches the column unchanged (no expression in between)."""
        if not column.table:  # an alias of this scope's SELECT list (ORDER BY a)
            return self._projection_origins(scope, column.name, seen)
        source = _lookup_source(scope, column.table)
        if isinstance(source, exp.Table):
            schema, table = self._table_key(source)
            return [(ColumnRef(schema, table, column.name), True)]
        if isinstance(source, Scope):
            return self._projection_origins(source, column.name, seen)
        return []

    def _projection_origins(self, scope: Scope, name: str, seen):
        key = (id(scope), name)
        if key in seen:  # recursive CTE
            return []
        seen = seen | {key}
        branches = scope.set_operation_scopes or [scope]
        found = []
        for branch in branches:
            if branch is not scope and branch.set_operation_scopes:
                found += self._projection_origins(branch, name, seen)
                continue
            selects = getattr(branch.expression, "selects", [])
            for projection in selects:
                if projection.alias_or_name != name:
                    continue
                inner = projection.unalias()
                direct = isinstance(inner, exp.Column)
                for inner_column in _columns_in(inner):
                    found += [
                        (ref, direct and d) for ref, d in self.origins(branch, inner_column, seen)
                    ]
        return found

    def direct_origin(self, scope, column):
        """The single real column whose value ``column`` is, or None."""
        key = id(column)
        if key not in self._direct:
            origins = self.origins(scope, column)
            refs = {ref for ref, direct in origins if direct}
            self._direct[key] = refs.pop() if len(refs) == 1 and len(origins) == 1 else None
        return self._direct[key]

    # -- predicates -----------------------------------------------------------------------
    def predicate_plans(self, scope: Scope):
        """``[(plan, combined)]`` per filter of the scope (WHERE, HAVING, JOIN ... ON), in order;
        ``combined`` for the WHERE clauses that enter the statement's predicate tree. A plan is
        the filter's AND/OR structure with, at each leaf, the comparison whose constants
        :func:`evaluate_plan` reads (or None where no column is compared with constants)."""
        select = scope.expression
        if not isinstance(select, exp.Select):
            return []
        filters = [select.args.get("where"), select.args.get("having")]
        filters += [join.args.get("on") for join in select.args.get("joins") or []]
        plans = []
        for node in filters:
            if node is None:
                continue
            body = node.this if isinstance(node, (exp.Where, exp.Having)) else node
            combined = isinstance(node, exp.Where) and scope.scope_type in _WHERE_COMBINED
            plans.append((self._plan(scope, body), combined))
        return plans

    def _plan(self, scope, node):
        if isinstance(node, exp.Paren):
            return self._plan(scope, node.this)
        if isinstance(node, (exp.And, exp.Or)):
            kind = "and" if isinstance(node, exp.And) else "or"
            return (kind, [self._plan(scope, part) for part in node.flatten()])
        for column_side, const_side, flipped in _comparison_sides(node):
            ref = self.direct_origin(scope, column_side)
            return None if ref is None else ("leaf", ref, node, const_side, flipped)
        return None


def evaluate_plan(plan, conditions: list):
    """Predicate tree of a plan with the literals now in the tree; appends the atomic conditions
    to ``conditions`` in order of appearance; None where unbounded."""
    if plan is None:
        return None
    if plan[0] == "leaf":
        condition = _make_condition(*plan[1:])
        if condition is not None:
            conditions.append(condition)
        return condition
    parts = [evaluate_plan(part, conditions) for part in plan[1]]
    if plan[0] == "and":
        kept = tuple(p for p in parts if p is not None)
        return None if not kept else kept[0] if len(kept) == 1 else AllOf(kept)
    return None if any(p is None for p in parts) else AnyOf(tuple(parts))


_WHERE_COMBINED = (ScopeType.ROOT, ScopeType.CTE, ScopeType.DERIVED_TABLE)
_PASS_THROUGH = (ScopeType.CTE, ScopeType.DERIVED_TABLE, ScopeType.UDTF)


def _effective_scope(scope: Scope) -> Scope:
    """A set-operation branch plays the role of the set operation it belongs to."""
    while scope.scope_type == ScopeType.SET_OPERATION and scope.parent is not None:
        scope = scope.parent
    return scope


def _is_pass_through(scope: Scope) -> bool:
    return _effective_scope(scope).scope_type in _PASS_THROUGH


def _projection_clause(scope: Scope) -> str:
    """Clause a projection of ``scope`` counts as: the root's is a projection; a subquery's is
    the clause the subquery sits in, in its enclosing scope."""
    scope = _effective_scope(scope)
    while scope.scope_type == ScopeType.SUBQUERY and scope.parent is not None:
        clause = _clause_in_scope(scope.expression, scope.parent)
        if clause != PROJECTION:
            return clause
        scope = _effective_scope(scope.parent)
    return PROJECTION


def _clause_in_scope(node: exp.Expr, scope: Scope, known: dict | None = None) -> str:
    """Clause of ``scope.expression`` that contains ``node``. ``known``: id(node) -> clause of
    nodes already walked in this scope, filled on the way (the columns of a chain of 3,000 ORs
    each walked up 3,000 levels: 5 s for a 32 kB statement)."""
    child, parent = node, node.parent
    walked, clause = [], PROJECTION
    while parent is not None and parent is not scope.expression:
        if known is not None and id(child) in known:
            clause = known[id(child)]
            break
        walked.append(child)
        if isinstance(parent, (exp.Where, exp.Having)):
            clause = SELECTION
            break
        if isinstance(parent, exp.Join) and child.arg_key == "on":
            clause = SELECTION
            break
        if isinstance(parent, exp.Group):
            clause = GROUP_BY
            break
        if isinstance(parent, exp.Order):
            clause = ORDER_BY
            break
        child, parent = parent, parent.parent
    if known is not None:
        known.update((id(n), clause) for n in walked)
    return clause


def _lookup_source(scope: Scope, alias: str):
    """Source named ``alias`` in ``scope`` or, for correlated references, its ancestors."""
    while scope is not None:
        source = scope.sources.get(alias)
        if source is not None:
            return source
        scope = scope.parent
    return None


def _columns_in(node: exp.Expr):
    if isinstance(node, exp.Column):
        return [node]
    return [c for c in node.find_all(exp.Column) if not isinstance(c.this, exp.Star)]


def _columns_of(scope: Scope):
    """Qualified columns of the scope plus unqualified ORDER BY references to SELECT aliases."""
    columns = [c for c in scope.columns if c.table]
    order = scope.expression.args.get("order") if isinstance(scope.expression, exp.Select) else None
    if order is not None:
        aliases = {s.alias_or_name for s in scope.expression.selects}
        columns += [c for c in order.find_all(exp.Column) if not c.table and c.name in aliases]
    return columns


# -- constants ------------------------------------------------------------------------------
_COMPARISON_OPS = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">",
                   exp.GTE: ">="}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _unwrap(node):
    while isinstance(node, (exp.Paren, exp.Cast)) or type(node).__name__ == "TryCast":
        node = node.this
    return node


def _comparison_sides(node):
    """``(column, constant side, flipped)`` candidates of a predicate node."""
    if type(node) in _COMPARISON_OPS:
        left, right = _unwrap(node.this), _unwrap(node.expression)
        if isinstance(left, exp.Column):
            yield left, right, False
        elif isinstance(right, exp.Column):
            yield right, left, True
    elif isinstance(node, (exp.Between, exp.In, exp.Like)):
        this = _unwrap(node.this)
        if isinstance(this, exp.Column):
            yield this, node, False


def constant_value(node):
    """The Python value of a literal (numbers as int/float, strings as str), else None."""
    node = _unwrap(node)
    negate = False
    if isinstance(node, exp.Neg):
        negate, node = True, _unwrap(node.this)
    if not isinstance(node, exp.Literal):
        return None  # a placeholder ($1), a column, a function call
    if node.is_string:
        return None if negate else node.this
    text = node.this
    try:
        value = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            return None
    return -value if negate else value


def _like_condition(ref, pattern):
    if not isinstance(pattern, str):
        return None
    body = pattern.rstrip("%")
    if "%" in body or "_" in body or "\\" in body:
        return None  # an inner wildcard bounds nothing we can cut at
    if body == pattern:
        return Condition(ref, "=", (pattern,))
    return Condition(ref, "prefix", (body,)) if body else None


def _make_condition(ref, node, const_side, flipped):
    if type(node) in _COMPARISON_OPS:
        value = constant_value(const_side)
        if value is None:
            return None
        op = _COMPARISON_OPS[type(node)]
        return Condition(ref, _FLIPPED[op] if flipped else op, (value,))
    if isinstance(node, exp.Between):
        low, high = constant_value(node.args["low"]), constant_value(node.args["high"])
        if low is None or high is None:
            return None
        return Condition(ref, "between", (low, high))
    if isinstance(node, exp.In):
        if node.args.get("query") is not None:
            return None
        values = [constant_value(v) for v in node.expressions]
        if not values or any(v is None for v in values):
            return None
        return Condition(ref, "in", tuple(values))
    if isinstance(node, exp.Like):
        return _like_condition(ref, constant_value(node.expression))
    return None
