"""The release-method contract: what a method declares so that the shared machinery (publish,
refresh, verification, grants) can act on its releases without knowing it.

A method module builds one ``ReleaseMethod`` and registers it in ``plpy_anon.db.methods.registry``:

* ``name``: the value of ``anon.releases.method`` for its releases;
* its parameters are declared in sql/functions (``parameters.SURFACES[name]``: SQL type, default,
  constraint, help; or ``surface`` for a method declared elsewhere), and validated once by
  ``validate``; a release's parameters travel as a ``plpy_anon.spec.ReleaseSpec`` (its promise,
  the method's settings -- ``spec.SETTINGS[name]`` or ``settings`` -- and what its build
  recorded), decoded once by ``spec_of`` from the SQL call's arguments or the catalog row;
* ``resolve(plpy, table, spec) -> Plan``: what the specification means for this table (columns,
  stored parameters), the release's default name and how its relations are built; creation.py does
  the rest (the source, the name, the catalog row, the checks) the same way for every method;
* ``refresh_release(plpy, GD, release, rebuild)``: only for releases that are not one
  materialized view (default: ``rebuild()``, which rebuilds the view beside the old one and swaps
  it in, refreshing.py; the hook may call it, e.g. ``rebuild(analyze=True)``);
* ``verification_spec(plpy, release, stats) -> verify.Spec``: only for releases whose relations
  are not one view of QIs + sensitive columns (default: verify.default_spec);
* the run behind every build and refresh, in three hooks that ``run`` calls in order:
  ``read(ctx) -> data`` (the source, read once in the caller's snapshot; ``ctx`` is a ``Run``),
  ``fit(data, spec) -> result`` (the core estimator), ``publish(ctx, data, result) ->
  (output, stats)`` (what the SQL function returns, and ``release_rows.stash_run``'s keywords);
  before them, ``out_of_core(method, plpy, GD, release, spec) -> output | None``: the run of a
  release larger than plpy_anon.build_memory, or None for the in-memory run (out_of_core.py).
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from plpy_anon import parameters
from plpy_anon.db import guards, release_rows, timing
from plpy_anon.db.encodings import refuse_bytes_not_utf8, sql_ascii
from plpy_anon.db.sqltext import jsonb, progress
from plpy_anon.spec import ReleaseSpec


@dataclass
class Plan:
    """A release about to be created, as its method resolved it (``ReleaseMethod.resolve``)."""

    parameters: dict                   # stored in anon.releases.parameters; refreshes read them
    default_name: str                  # the release's name when release_name is NULL
    query: Callable[[int], str] | None = None   # one materialized view: its query for release_id
    # otherwise build(release_id, qualified_name, release_name) creates the relations itself
    build: Callable[[int, str, str], None] | None = None
    # parameters naming the release's other relations, from its final name (Break-Merge's views)
    objects: Callable[[str], dict] | None = None
    created: Callable[[dict], None] | None = None   # after the catalog row exists (trust's grants)


@dataclass(frozen=True)
class ReleaseMethod:
    name: str
    resolve: Callable | None = None
    declared: parameters.Surface | None = None   # a method whose surface is not in SURFACES
    settings: type | None = None                 # a method whose settings are not in spec.SETTINGS
    refresh_release: Callable | None = None
    verification_spec: Callable | None = None
    # check_relations(plpy, release): refuse relations of the release that are not the ones
    # plpy_anon writes (a method whose release has plain views, which run code when read)
    check_relations: Callable | None = None
    read: Callable | None = None
    fit: Callable | None = None
    publish: Callable | None = None
    # reads_text(spec): the source columns its run reads into Python (default: read_by_default)
    reads_text: Callable | None = None
    out_of_core: Callable | None = None

    @property
    def surface(self) -> parameters.Surface:
        return self.declared or parameters.SURFACES[self.name]

    def validate(self, **values) -> dict:
        """The method's parameters checked by their declarations (InvalidParameter, 22023)."""
        return self.surface.validate(values)

    def columns_read(self, spec: ReleaseSpec) -> tuple[str, ...]:
        """The source columns a run of a release of ``spec`` reads into Python."""
        return (self.reads_text or read_by_default)(spec)

    def spec_of(self, stored: dict) -> ReleaseSpec:
        """A release's specification from its stored parameters, every constrained one validated;
        a key missing (a release made before the parameter existed) is its default."""
        return ReleaseSpec.decode(self.name, stored, self.surface, self.settings)


def read_by_default(spec: ReleaseSpec) -> tuple[str, ...]:
    """A release's QIs and sensitive columns, and the stable mode's identifiers (hashed)."""
    promise = spec.promise
    stable = promise.refresh_mode == "stable"
    return (*(promise.quasi_identifiers or ()), *(promise.sensitive or ()),
            *((promise.identifiers or ()) if stable else ()))


def refuse_unreadable_texts(method: ReleaseMethod, plpy, release: dict, spec: ReleaseSpec) -> None:
    """In a SQL_ASCII database, refuse a run of ``release`` before it reads anything when a
    column it reads holds bytes that are not UTF-8 (encodings.refuse_bytes_not_utf8)."""
    if sql_ascii(plpy):
        refuse_bytes_not_utf8(plpy, guards.table_in_query(plpy, release["source"]),
                              method.columns_read(spec))


@dataclass
class Run:
    """One run of a method over its release's source: what the hooks share."""

    plpy: object
    GD: dict | None
    release_id: int
    release: dict              # the anon.releases row
    spec: ReleaseSpec          # its parameters, decoded and validated once
    started: float             # time.monotonic() at the start (stash_run's clock)
    read_s: float = 0.0        # seconds spent in read
    fit_s: float = 0.0         # seconds spent in fit
    memory_mib: dict = field(default_factory=dict)   # backend memory after each phase

    @property
    def parameters(self) -> dict:
        """The stored parameters, validated and completed (keys the specification does not type:
        a method's recorded figures, the stable mode's state)."""
        return self.spec.stored

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def note_memory(self, phase: str) -> None:
        """Record the backend's resident memory now and its peak so far (VmRSS / VmHWM, MiB),
        so a release's metrics say which phase made the peak (Linux; nothing elsewhere)."""
        status = backend_memory()
        if status:
            # VmHWM is read from the kernel's approximate per-CPU counters, which can show a
            # peak 1 MiB lower than an earlier reading did: the peak so far is the largest seen
            status["peak"] = max([status["peak"], *(m["peak"] for m in self.memory_mib.values())])
            self.memory_mib[phase] = status


def return_free_memory() -> None:
    """Hand the heap memory Python freed back to the OS (glibc ``malloc_trim``): large arrays
    freed by one phase otherwise stay in this backend's resident set and stack under the next
    phase's peak (glibc raises its mmap threshold as large blocks are freed, so they land on
    the heap). A no-op where there is no glibc."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes
            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


def backend_memory() -> dict | None:
    """{"rss": VmRSS, "peak": VmHWM} of this process in MiB, from /proc/self/status."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
    except OSError:
        return None
    return {"rss": int(fields["VmRSS"].split()[0]) // 1024,
            "peak": int(fields["VmHWM"].split()[0]) // 1024}


def _run_summary(stats: dict, fit_s: float) -> str:
    """One progress line of what the run made: rows and classes when the method has them."""
    metrics = stats.get("metrics") if isinstance(stats.get("metrics"), dict) else {}
    made = [f"{stats['row_count']:,} rows"] if stats.get("row_count") is not None else []
    if metrics.get("n_classes") is not None:
        made.append(f"{metrics['n_classes']:,} classes")
    return f"anonymized{': ' + ', '.join(made) if made else ''} ({fit_s:.1f} s); writing the release"


def run(method: ReleaseMethod, plpy, GD, release_id: int):
    """The one run of every method: look up the release, validate its parameters once, refuse
    texts PL/Python cannot read, then the run out of core when the method has one and it applies,
    else read the source, fit, and stash the run's statistics for the catalog; returns the
    hook's output."""
    started = time.monotonic()
    release = release_rows.by_id(plpy, release_id)
    stored = jsonb(release["parameters"])
    spec = method.spec_of(stored)
    # before anything reads the source (out of core, the planning's counts read texts too)
    refuse_unreadable_texts(method, plpy, release, spec)
    if method.out_of_core is not None:
        output = method.out_of_core(method, plpy, GD, release, spec)
        if output is not None:
            return output
    with release_rows.owner_state(plpy):         # the stable mode's state is its owner's
        secret = release_rows.secrets(plpy, release_id, stored)
        if secret:       # the run reads its parameters from the row: with the secrets, in memory only
            release = {**release, "parameters": json.dumps({**stored, **secret})}
            spec = dataclasses.replace(spec, stored={**spec.stored, **secret},
                                       given=spec.given | set(secret))
        ctx = Run(plpy, GD, release_id, release, spec, started)
        ctx.note_memory("start")
        with timing.phase("read"):
            data = method.read(ctx)
    ctx.read_s = ctx.elapsed()
    progress(plpy, f"read the source ({ctx.read_s:.1f} s)")
    return_free_memory()
    ctx.note_memory("read")
    t0 = time.monotonic()
    with timing.phase("fit"):
        result = method.fit(data, ctx.spec)
    ctx.fit_s = time.monotonic() - t0
    return_free_memory()
    ctx.note_memory("fit")
    with timing.phase("publish"):
        output, stats = method.publish(ctx, data, result)
    progress(plpy, _run_summary(stats, ctx.fit_s))
    del data, result      # before the output is copied into SQL values: only the output stays
    return_free_memory()
    ctx.note_memory("publish")
    if ctx.memory_mib and isinstance(stats.get("metrics"), dict):
        stats["metrics"]["memory_mib"] = ctx.memory_mib
    release_rows.stash_run(GD, release_id, started=started, **stats)
    return output
