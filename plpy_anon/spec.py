"""A release's specification, typed: what it promises (:class:`Promise`, shared by every method),
its method's own settings (one small frozen dataclass per method) and what its build recorded
about the table and its relations (:class:`Built`).

Decoded and validated once, where a release's parameters enter: from the SQL call's validated
arguments when a release is created, from its catalog row (``anon.releases.parameters``, jsonb)
when it is refreshed or verified. A key a row lacks (a release made by an earlier version, or
a method that does not store it) is its declared default. The code behind the boundary reads
attributes, never keys.

The catalog's format does not change: :meth:`ReleaseSpec.encode` writes the row it was decoded
from, with the typed values in place of the stored ones, and keys this module does not type
(a method's figures, the stable mode's state) kept as they were.

Standard library only, like :mod:`plpy_anon.parameters`, whose declarations validate the values.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from plpy_anon import parameters


def _names(value) -> tuple[str, ...]:
    """A list of column names as stored (list, or one name as text: fusion's sensitive)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class Promise:
    """What every release method promises about its rows, and how it keeps the promise over
    refreshes; the verification checks it from the released rows."""

    k: int | None = None                  # every class has at least k rows (None: no classes)
    l: int | None = None                  # sensitive values per class (None: no l-diversity)
    l_diversity: str = "distinct"         # distinct | entropy | recursive
    c: float | None = None                # recursive (c, l)-diversity's c
    t: float | None = None                # t-closeness
    # None: not given (at creation: the columns' declared roles decide)
    quasi_identifiers: tuple[str, ...] | None = None
    sensitive: tuple[str, ...] | None = None
    identifiers: tuple[str, ...] | None = None
    refresh_mode: str | None = None       # stable | fresh (None: the method decides)
    layout: str | None = None             # compact | flat (Mondrian family)

    @classmethod
    def of(cls, values: Mapping) -> Promise:
        """The promise in catalog parameters (a row, or one being built), unchecked."""
        return _typed(cls, values)

    @property
    def models_asked(self) -> bool:
        """Whether a privacy model beyond distinct l is asked (entropy, recursive, t)."""
        return (self.l is not None and self.l > 1 and self.l_diversity != "distinct") \
            or self.t is not None


@dataclass(frozen=True)
class Built:
    """What a release's build recorded about its table and relations (set by the method's
    resolve; read by refreshes, the verification and grants)."""

    hierarchies: tuple[str, ...] = ()         # QIs generalized by a stored hierarchy
    released: tuple[str, ...] = ()            # source columns the release publishes
    dropped: tuple[str, ...] = ()             # source columns it leaves out
    ordered_sensitive: tuple[str, ...] = ()   # sensitive columns compared in value order (t)
    joined_back: bool = True                  # rows joined back to the source (else written)
    packed_literals: bool = False             # classes' literals in anon.partition_slice.literals (else its jsonb)
    storage: str | None = None                # a compact release's materialized view
    objects: tuple[str, ...] = ()             # the release's other relations, dependents first
    grantees: tuple[str, ...] | None = None   # the roles it is granted to (None: analysts)
    salt_digest: str | None = None            # the stable mode's salt's (release_rows.salt_digest)

    @classmethod
    def of(cls, values: Mapping) -> Built:
        """What catalog parameters (a row, or one being built) record, unchecked."""
        return _typed(cls, values)


# ------------------------------------------------------------------------- the methods' settings

@dataclass(frozen=True)
class MondrianSettings:
    split: str = "median"


@dataclass(frozen=True)
class PrioritizedSettings:
    priorities: object = None                 # 'learned', 'none' or {column: weight}
    target: str | None = None
    metric_weights: Mapping | None = None
    cut_points: bool | None = None
    cut_tolerance: float = 0.5
    split: str = "median"


@dataclass(frozen=True)
class BreakMergeSettings:
    max_categories: int = 64
    max_rule_probability: float | None = None
    max_rule_antecedents: int = 2
    qit: str | None = None                    # the QIT's storage relation
    merged: str | None = None                 # the merged view
    sensitive_tables: Mapping = field(default_factory=dict)   # attribute -> its ST relation


@dataclass(frozen=True)
class TrustSettings:
    requester: str | None = None
    purpose: str | None = None
    max_suppression: float = 0.05
    gamma: float = 2.0
    d_min: float = 0.0
    d_max: float = 1.0
    history_weight: float = 0.5
    half_life_days: float | None = None       # None: no decay
    min_share: float = 0.1
    level_weights: Mapping | None = None


@dataclass(frozen=True)
class PatternSettings:
    columns: tuple[str, ...] = ()
    segment: int = 100
    sample: float = 0.3
    iterations: int = 4000
    seed: int | None = None
    bounds: Mapping | None = None
    delta: float = 16.0
    max_unchanged: float = 0.10


@dataclass(frozen=True)
class FusionSettings:
    identifier: str | None = None
    attributes: tuple[str, ...] = ()
    auxiliary: str | None = None
    auxiliary_identifier: str | None = None
    k_from: int = 2
    k_to: int = 30
    rules: object = None
    accept_unprotected: bool = False
    verdict: Mapping | None = None            # the scan's verdict (core.fusion)
    scan: tuple = ()                          # the scanned ks' figures


@dataclass(frozen=True)
class NoSettings:
    """A method with nothing beyond its promise."""


#: each method's settings, by anon.releases.method
SETTINGS = {"mondrian": MondrianSettings, "prioritized_mondrian": PrioritizedSettings,
            "break_merge": BreakMergeSettings, "trust": TrustSettings,
            "pattern": PatternSettings, "fusion": FusionSettings}

_TUPLES = {"quasi_identifiers", "sensitive", "identifiers", "hierarchies", "released", "dropped",
           "ordered_sensitive", "objects", "grantees", "columns", "attributes", "scan"}
#: jsonb arguments: PL/Python hands them over as text
_JSON = {"metric_weights", "level_weights", "bounds"}


def _typed(cls, values: Mapping):
    """An instance of dataclass ``cls`` from ``values``: a missing or NULL key is the field's
    default; lists become tuples, JSON objects copied."""
    kwargs = {}
    for f in fields(cls):
        if values.get(f.name) is None:
            continue
        value = values[f.name]
        if f.name in _TUPLES:
            value = _names(value) if f.name not in ("grantees", "scan") else tuple(value)
        elif f.name in _JSON and isinstance(value, str):
            value = json.loads(value)
        elif isinstance(value, dict):
            value = dict(value)
        kwargs[f.name] = value
    return cls(**kwargs)


@dataclass(frozen=True)
class ReleaseSpec:
    """One release's specification: method, promise, the method's settings, what its build
    recorded; ``stored``: the parameters it was decoded from, validated and completed with the
    declared defaults (``given``: the keys the row held)."""

    method: str
    promise: Promise
    settings: object
    built: Built
    stored: Mapping = field(default_factory=dict, repr=False, compare=False)
    given: frozenset = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def decode(cls, method: str, values: Mapping, surface: parameters.Surface | None = None,
               settings: type | None = None, *, checked: bool = True) -> ReleaseSpec:
        """The specification of a release by ``method`` from its catalog parameters or its SQL
        function's arguments; every constrained value checked by its declaration (``surface``,
        default the method's; InvalidParameter, 22023), a missing one its default.
        ``settings``: the method's settings class (default: :data:`SETTINGS`'s). ``checked``
        false: the values as stored, unchecked (the verification reads what was promised)."""
        surface = surface or parameters.SURFACES.get(method)
        given = frozenset(values)
        values = dict(values)
        if surface is not None and checked:
            constrained = [p.name for p in surface.parameters if p.constraint is not None]
            values.update(surface.validate({name: values.get(name) for name in constrained}))
        return cls(method, _typed(Promise, values),
                   _typed(settings or SETTINGS.get(method, NoSettings), values),
                   _typed(Built, values), values, given)

    def encode(self) -> dict:
        """The catalog parameters: the row decoded, with this specification's values in place of
        the stored ones (a key the row did not hold is added only when not its default)."""
        out = {key: value for key, value in self.stored.items() if key in self.given}
        for part in (self.promise, self.built, self.settings):
            default = type(part)()
            for f in fields(part):
                value = getattr(part, f.name)
                if f.name not in out and value == getattr(default, f.name):
                    continue
                if f.name == "sensitive" and isinstance(out.get("sensitive"), str):
                    value = value[0] if value else None     # fusion stores its one column as text
                elif isinstance(value, tuple):
                    value = list(value)
                out[f.name] = value
        return out
