"""The parameters of the release methods, each declared once: name, SQL type, default,
constraint, help. The ones every method may share are written here (:data:`SHARED`); each method
declares its SQL function, its own parameters and the shared ones it takes in
``sql/functions/NNN-<method>.toml`` (``release = ...`` with ``parameters``), which the build
writes into ``declared_methods.json`` for the installed package: :data:`SURFACES`.

Standard library only, so that everything reads it: ``sql/build.py`` (before any environment
exists) writes the SQL signatures of the methods' functions and the reference from it; the db
layer validates with it; the client and the CLI build their signatures and options from it.

A constraint raises :class:`~plpy_anon.core.errors.InvalidParameter` (SQLSTATE 22023) with a
hint naming the fix, in the style of scikit-learn's ``_parameter_constraints``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from numbers import Integral, Real
from pathlib import Path

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.core.k_anonymity import HINT as K_HINT
from plpy_anon.core.k_anonymity import MIN_K


@dataclass(frozen=True)
class Interval:
    """A number in ``[low, high]`` (``None``: unbounded; ``open_low``: ``(low, high]``);
    ``integer`` refuses fractions."""

    low: float | None = None
    high: float | None = None
    integer: bool = False
    open_low: bool = False

    def check(self, name: str, value, hint: str | None):
        kind = Integral if self.integer else Real
        if isinstance(value, bool) or not isinstance(value, kind):
            raise InvalidParameter(
                f"{name} must be {'an integer' if self.integer else 'a number'}, got {value!r}", hint=hint)
        if value != value:  # noqa: PLR0124 -- NaN, which passes every comparison
            raise InvalidParameter(f"{name} must be a number, got NaN", hint=hint)
        if self.low is not None and self.open_low and value <= self.low:
            raise InvalidParameter(f"{name} must be greater than {_num(self.low)}, got {value}", hint=hint)
        if self.low is not None and value < self.low:
            raise InvalidParameter(f"{name} must be at least {_num(self.low)}, got {value}", hint=hint)
        if self.high is not None and value > self.high:
            raise InvalidParameter(f"{name} must be at most {_num(self.high)}, got {value}", hint=hint)
        return int(value) if self.integer else value


@dataclass(frozen=True)
class Choice:
    """One of ``values`` (text)."""

    values: tuple[str, ...]

    def check(self, name: str, value, hint: str | None):
        if not isinstance(value, str) or value not in self.values:
            raise InvalidParameter(f"{name} must be one of {', '.join(self.values)}, got {value!r}",
                                   hint=hint)
        return value


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


_LITERAL = re.compile(r"^'((?:[^']|'')*)'$")


@dataclass(frozen=True)
class Parameter:
    """One argument of a method's SQL function. ``default``: its SQL literal (``NULL``: optional,
    the method decides what its absence means); None: required. ``sql_type`` ``"text | jsonb"``
    declares one overload per type. ``hint``: how to fix a value the constraint refuses."""

    name: str
    sql_type: str
    default: str | None = None
    constraint: Interval | Choice | None = None
    help: str = ""
    hint: str | None = None

    @property
    def required(self) -> bool:
        return self.default is None

    @property
    def python_default(self):
        """The default as a Python value (None for NULL or a required parameter)."""
        text = self.default
        if text is None or text == "NULL":
            return None
        if text in ("true", "false"):
            return text == "true"
        quoted = _LITERAL.match(text)
        if quoted:
            return quoted.group(1).replace("''", "'")
        return int(text) if re.fullmatch(r"-?\d+", text) else float(text)

    def sql(self) -> str:
        """The argument as ``sql/build.py`` declares it: ``name type [DEFAULT literal]``."""
        return f"{self.name} {self.sql_type}" + (f" DEFAULT {self.default}" if self.default else "")

    def check(self, value):
        """``value`` validated; NULL is the default (a required parameter must not be NULL)."""
        if value is None:
            if self.required:
                raise InvalidParameter(f"{self.name} must not be NULL", hint=self.hint)
            return self.python_default
        return self.constraint.check(self.name, value, self.hint) if self.constraint else value


@dataclass(frozen=True)
class Surface:
    """The SQL function of a release method and its parameters, in their SQL order."""

    method: str                      # anon.releases.method
    function: str                    # anon.<function>
    parameters: tuple[Parameter, ...]
    by_name: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "by_name", {p.name: p for p in self.parameters})

    def sql_args(self) -> list[str]:
        return [p.sql() for p in self.parameters]

    def validate(self, values: dict, names=None) -> dict:
        """``values`` checked by their parameters (only ``names`` if given); names this method
        does not declare pass unchanged (the method's own code checks them)."""
        return {name: self.by_name[name].check(value) if name in self.by_name
                and (names is None or name in names) else value
                for name, value in values.items()}


# ------------------------------------------------------------------------------ shared

SOURCE = Parameter("source", "regclass", help="The table to release.")
# the declaration's check of k (one of three: core.k_anonymity)
K = Parameter("k", "integer", constraint=Interval(MIN_K, None, integer=True),
              help="Every class has at least k rows.", hint=K_HINT)
L = Parameter("l", "integer", "NULL", Interval(1, None, integer=True),
              help="At least l distinct sensitive values per class (NULL: no l-diversity).",
              hint="Pass l => 2 or more, or omit it.")
QUASI_IDENTIFIERS = Parameter("quasi_identifiers", "text[]", "NULL",
                              help="Quasi-identifiers (default: the declared ones).")
SENSITIVE = Parameter("sensitive", "text[]", "NULL", help="Sensitive columns (default: the declared ones).")
IDENTIFIERS = Parameter("identifiers", "text[]", "NULL", help="Identifier columns, dropped.")
RELEASE_NAME = Parameter("release_name", "text", "NULL", help="Release name (default: derived from the table).")
RELEASE_SCHEMA = Parameter("release_schema", "text", "'release'", help="Schema of the release.")
REPLACE = Parameter("replace", "boolean", "false", help="Rebuild an existing release of that name.")
RELEASE = (RELEASE_NAME, RELEASE_SCHEMA, REPLACE)

# the privacy models of the Mondrian family (core.privacy_models)
L_DIVERSITY = Parameter("l_diversity", "text", "'distinct'", Choice(("distinct", "entropy", "recursive")),
                        help="distinct (>= l values), entropy (entropy >= ln l) or recursive (c, l).",
                        hint="Use l_diversity => 'distinct' (the default), 'entropy' or 'recursive'.")
C = Parameter("c", "double precision", "NULL", Interval(0, None, open_low=True),
              help="Recursive (c, l)-diversity's c: r1 < c (r_l + ... + r_m).",
              hint="Pass c => a number > 0 (e.g. 3) with l_diversity => 'recursive', or omit it.")
T = Parameter("t", "double precision", "NULL", Interval(0, 1, open_low=True),
              help="t-closeness: each class's sensitive distribution within EMD t of the table's.",
              hint="Pass t => a number in (0, 1], e.g. 0.2, or omit it.")
SPLIT = Parameter("split", "text", "'median'", Choice(("median", "utility")),
                  help="How a partition is cut: median (default) or utility (least information loss).",
                  hint="Use split => 'median' (the default) or 'utility'.")
MODELS = (L_DIVERSITY, C, T, SPLIT)
LAYOUT = Parameter("layout", "text", "NULL", Choice(("flat", "compact")),
                   help="compact (a view over one stored row per class) or flat (a materialized "
                        "view of one row per person); NULL: compact unless a sensitive column "
                        "cannot be stored so (an array, json, a type of its own: then flat).",
                   hint="Use layout => 'compact', 'flat', or omit it.")

REFRESH_MODE = Parameter("refresh_mode", "text", "NULL", Choice(("stable", "fresh")),
                         help="stable: refreshes keep each person's class (classes only merge), so an "
                              "analyst who keeps every version cannot narrow anyone below l candidate "
                              "values; fresh: a new partition each time. NULL: stable with l and "
                              "identifier columns, fresh otherwise.",
                         hint="Use refresh_mode => 'stable', 'fresh', or omit it.")

# ------------------------------------------------------------------------------ methods

#: the shared parameters a method's declaration names instead of spelling them out
SHARED = {p.name: p for p in (SOURCE, K, L, QUASI_IDENTIFIERS, SENSITIVE, IDENTIFIERS, *RELEASE,
                              *MODELS, LAYOUT, REFRESH_MODE)}
#: the methods declared in sql/functions/*.toml (``release = ...`` with ``parameters``), written
#: by sql/build.py: the package installed in the backend has no sql/ directory to read them from
DECLARED = Path(__file__).with_name("declared_methods.json")


def _shared(method: str, name: str) -> Parameter:
    if name not in SHARED:
        raise ValueError(f"method {method}: no shared parameter {name!r} "
                         f"(shared: {', '.join(SHARED)})")
    return SHARED[name]


def declared_surface(method: str, function: str, entries: list) -> Surface:
    """The surface a declaration gives: each entry is a shared parameter's name (:data:`SHARED`)
    or a table ``{name, sql_type, default, help, hint, minimum, maximum, integer, choices}``;
    a table with ``like = "<shared name>"`` is that shared parameter with the fields it gives
    replaced (its name by default, and its constraint unless it gives one: trust's k with no
    default, fusion's smallest scanned k, both with k's one minimum)."""
    declared = []
    for entry in entries:
        if isinstance(entry, str):
            declared.append(_shared(method, entry))
            continue
        entry = dict(entry)
        constraint = None
        if "choices" in entry:
            constraint = Choice(tuple(entry.pop("choices")))
        elif {"minimum", "maximum", "integer"} & set(entry):
            constraint = Interval(entry.pop("minimum", None), entry.pop("maximum", None),
                                  integer=entry.pop("integer", False))
        if "like" in entry:
            base = _shared(method, entry.pop("like"))
            declared.append(replace(base, **entry, **({"constraint": constraint} if constraint
                                                      else {})))
        else:
            declared.append(Parameter(constraint=constraint, **entry))
    return Surface(method, function, tuple(declared))


def declared_surfaces(declarations: dict) -> dict[str, Surface]:
    """``{method: {"function": ..., "parameters": [...]}}`` -> their surfaces."""
    return {method: declared_surface(method, d["function"], d["parameters"])
            for method, d in declarations.items()}


def _installed_declarations() -> dict:
    return json.loads(DECLARED.read_text()) if DECLARED.exists() else {}


#: every method's surface, by anon.releases.method, from its declaration in sql/functions
SURFACES = declared_surfaces(_installed_declarations())


def function_parameters(function: str) -> list[Parameter]:
    """The parameters of SQL function anon.<function> over every method it creates (mondrian_view:
    plain and prioritized Mondrian), in their SQL order; one that not every method declares
    (priorities) is optional."""
    surfaces = [s for s in SURFACES.values() if s.function == function]
    merged: dict[str, Parameter] = {}
    for surface in surfaces:
        for p in surface.parameters:
            merged.setdefault(p.name, p)
    everywhere = set.intersection(*(set(s.by_name) for s in surfaces))
    return [p if p.name in everywhere else replace(p, default="NULL") for p in merged.values()]
