"""Parameters shared by the release methods, declared once and validated once.

In the style of scikit-learn's ``_parameter_constraints`` / ``validate_params``: a method declares
``{name: Constraint}`` and ``validate(constraints, values)`` checks every value against its
constraint, raising ``InvalidParameter`` (SQLSTATE 22023) with one message per constraint and a
hint naming the fix. ``k`` and ``l`` are the same parameter in every method, so their checks live
here and nowhere else (``check_k``, ``check_l``).
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

from plpy_anon.core.errors import InsufficientData, InvalidParameter


@dataclass(frozen=True)
class Interval:
    """A number in ``[low, high]`` (``None``: unbounded); ``integer`` refuses fractions;
    ``optional`` lets NULL through (the caller's default applies)."""

    low: float | None = None
    high: float | None = None
    integer: bool = False
    optional: bool = False
    hint: str | None = None
    open_low: bool = False      # low itself excluded: ``(low, high]``

    def check(self, name: str, value):
        if value is None:
            if self.optional:
                return None
            raise InvalidParameter(f"{name} must not be NULL", hint=self.hint)
        kind = Integral if self.integer else Real
        if isinstance(value, bool) or not isinstance(value, kind):
            raise InvalidParameter(
                f"{name} must be {'an integer' if self.integer else 'a number'}, got {value!r}",
                hint=self.hint)
        if self.low is not None and self.open_low and value <= self.low:
            raise InvalidParameter(f"{name} must be greater than {_num(self.low)}, got {value}",
                                   hint=self.hint)
        if self.low is not None and value < self.low:
            raise InvalidParameter(f"{name} must be at least {_num(self.low)}, got {value}",
                                   hint=self.hint)
        if self.high is not None and value > self.high:
            raise InvalidParameter(f"{name} must be at most {_num(self.high)}, got {value}",
                                   hint=self.hint)
        return int(value) if self.integer else value


@dataclass(frozen=True)
class Choice:
    """One of ``values`` (text); NULL -- and a key missing from the parameters of a release made
    before the parameter existed -- means ``default``."""

    values: tuple
    default: str
    hint: str | None = None

    def check(self, name: str, value):
        if value is None:
            return self.default
        if not isinstance(value, str) or value not in self.values:
            raise InvalidParameter(f"{name} must be one of {', '.join(self.values)}, got {value!r}",
                                   hint=self.hint)
        return value


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


#: k-anonymity: every class gets at least k rows. k = 1 releases every row as it is.
K = Interval(2, None, integer=True,
             hint="Use k => 2 or more (every class gets at least k rows; k = 1 would release every "
                  "row as it is).")
#: k where the method has a default of its own when NULL (trust: the paper's scheme alone)
OPTIONAL_K = Interval(2, None, integer=True, optional=True, hint=K.hint)
#: distinct l-diversity: at least l distinct sensitive values per class; NULL: no l-diversity
L = Interval(1, None, integer=True, optional=True, hint="Pass l => 2 or more, or omit it.")


#: the kind of l-diversity asked with l (Mondrian family; privacy_models.L_DIVERSITY)
L_DIVERSITY = Choice(("distinct", "entropy", "recursive"), "distinct",
                     hint="Use l_diversity => 'distinct' (the default), 'entropy' or 'recursive'.")
#: recursive (c,l)-diversity's c: r_1 < c (r_l + ... + r_m); NULL unless l_diversity = 'recursive'
C = Interval(0, None, optional=True, open_low=True,
             hint="Pass c => a number > 0 (e.g. 3) with l_diversity => 'recursive', or omit it.")
#: t-closeness: EMD between each class's and the table's sensitive distribution <= t; NULL: none
T = Interval(0, 1, optional=True, open_low=True,
             hint="Pass t => a number in (0, 1], e.g. 0.2, or omit it.")
#: how a Mondrian-family partition is cut (core.mondrian.SPLITS)
SPLIT = Choice(("median", "utility"), "median",
               hint="Use split => 'median' (the default) or 'utility'.")
#: the privacy-model parameters of every Mondrian-family method
MODELS = {"l_diversity": L_DIVERSITY, "c": C, "t": T, "split": SPLIT}


def check_models(parameters: dict) -> None:
    """The combination of l, l_diversity, c and t (each already validated alone): c only, and
    always, with recursive; entropy/recursive only with l (InvalidParameter, 22023)."""
    from plpy_anon.core.privacy_models import check_models as check
    check(parameters.get("l"), parameters["l_diversity"], parameters.get("c"),
          parameters.get("t"))


def validate(constraints: dict, values: dict) -> dict:
    """``values`` checked against ``constraints`` (names without a constraint pass unchanged)."""
    return {name: constraints[name].check(name, value) if name in constraints else value
            for name, value in values.items()}


def check_k(k, *, optional: bool = False) -> int | None:
    """The one k check of every method: an integer >= 2 (NULL only where ``optional``)."""
    return (OPTIONAL_K if optional else K).check("k", k)


def check_k_rows(k: int, n_rows: int, what: str) -> None:
    """k must not exceed the rows read: no class of k rows can be formed otherwise."""
    if n_rows < k:
        raise InsufficientData(f"table {what} has {n_rows} rows, fewer than k = {k}",
                               hint=f"Use k <= {n_rows}, or release a larger table.")


def check_l(l) -> int | None:
    """The one l check: NULL (no l-diversity) or an integer >= 1."""
    return L.check("l", l)
