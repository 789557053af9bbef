"""The methods' parameters, declared once (plpy_anon.parameters), and the checks built on them."""
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plpy_anon import parameters
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.k_anonymity import check_k
from plpy_anon.db import params
from plpy_anon.parameters import SURFACES, K, L
from plpy_anon.spec import Promise

ROOT = Path(__file__).resolve().parents[2]
MONDRIAN = SURFACES["mondrian"]


@given(st.integers(min_value=-10**6, max_value=10**6))
def test_k_is_an_integer_of_two_or_more(k):
    if k >= 2:
        assert K.check(k) == k
    else:
        with pytest.raises(InvalidParameter, match=f"k must be at least 2, got {k}") as info:
            K.check(k)
        assert info.value.sqlstate == "22023" and "k => 2" in info.value.hint


@pytest.mark.parametrize("k", [2.5, "5", True])
def test_k_refuses_what_is_not_an_integer(k):
    with pytest.raises(InvalidParameter, match="k must be an integer"):
        K.check(k)


def test_k_null_is_refused_unless_the_method_has_a_default():
    with pytest.raises(InvalidParameter, match="k must not be NULL"):
        K.check(None)
    optional_k = SURFACES["trust"].by_name["k"]      # trust: the paper's scheme alone
    assert optional_k.check(None) is None
    with pytest.raises(InvalidParameter, match="k must be at least 2, got 1"):
        optional_k.check(1)


@given(st.integers(min_value=2, max_value=50), st.integers(min_value=0, max_value=50))
def test_k_at_most_the_rows_read(k, n):
    if n >= k:
        check_k(k, n, "table s.t")
    else:
        with pytest.raises(InsufficientData, match=f"table s.t has {n} rows, fewer than k = {k}"):
            check_k(k, n, "table s.t")


@given(st.one_of(st.none(), st.integers(min_value=-100, max_value=100)))
def test_l_is_null_or_at_least_one(l):
    if l is None or l >= 1:
        assert L.check(l) == l
    else:
        with pytest.raises(InvalidParameter, match=f"l must be at least 1, got {l}"):
            L.check(l)


def test_validate_checks_declared_names_only():
    out = MONDRIAN.validate({"k": 3, "l": None, "other": "x"})
    assert out == {"k": 3, "l": None, "other": "x"}
    with pytest.raises(InvalidParameter, match="l must be at least 1"):
        MONDRIAN.validate({"l": 0})


def test_model_parameters_default_when_missing_and_refuse_with_a_hint():
    # a release made before the models existed has none of these keys: its old behaviour
    out = MONDRIAN.validate({"l_diversity": None, "c": None, "t": None, "split": None})
    assert out == {"l_diversity": "distinct", "c": None, "t": None, "split": "median"}
    for name, value, match in (("l_diversity", "shannon", "must be one of distinct"),
                               ("split", "best", "must be one of median, utility"),
                               ("c", 0, "c must be greater than 0"),
                               ("t", 0, "t must be greater than 0"),
                               ("t", 1.01, "t must be at most 1"),
                               ("t", float("nan"), "t must be a number, got NaN")):
        with pytest.raises(InvalidParameter, match=match) as info:
            MONDRIAN.validate({name: value})
        assert info.value.sqlstate == "22023" and f"{name} =>" in info.value.hint
    assert MONDRIAN.validate({"t": 1, "c": 0.5}) == {"t": 1, "c": 0.5}
    with pytest.raises(InvalidParameter, match="c applies to recursive"):
        params.check_models(Promise(l=2, c=2))


@pytest.mark.parametrize("surface", list(SURFACES.values()), ids=list(SURFACES))
def test_every_default_reads_back_as_the_sql_literal_it_is(surface):
    for p in surface.parameters:
        assert p.sql() == f"{p.name} {p.sql_type}" + (f" DEFAULT {p.default}" if p.default else "")
        value = p.python_default
        if p.default in (None, "NULL"):
            assert value is None
        elif p.sql_type == "boolean":
            assert value is (p.default == "true")
        elif p.sql_type == "text":
            assert f"'{value}'" == p.default
        else:
            assert float(value) == float(p.default) and isinstance(value, (int, float))
        assert p.help.endswith(".") and len(p.help) > 10, (surface.method, p.name)
    names = [p.name for p in surface.parameters]
    assert len(names) == len(set(names)) and names[0] == "source"


def _sources():
    files = [*(ROOT / "sql").rglob("*.sql"), *(ROOT / "sql" / "functions").glob("*.toml"),
             *(p for p in (ROOT / "plpy_anon").rglob("*.py") if p.name != "parameters.py"
               and "core" not in p.parts)]
    return {p.relative_to(ROOT): p.read_text() for p in files}


# functions outside the release methods with an argument of the same name, type and default
OTHER_FUNCTIONS = {("sql/functions/110-snapshots.toml", "replace boolean DEFAULT false"),      # snapshot
                   ("sql/functions/080-trust.toml", "replace boolean DEFAULT false")}         # define_purpose


def test_each_methods_default_is_written_once():
    """Outside plpy_anon/parameters.py (and the core estimators, which take plain Python
    arguments), no SQL declaration, Python signature or lookup spells a method parameter's
    default again."""
    sources = _sources()
    found = []
    for surface in SURFACES.values():
        for p in surface.parameters:
            if p.default in (None, "NULL"):
                continue
            default = re.escape(str(p.python_default))
            patterns = [re.escape(p.sql()) + r"['\"]",                                # SQL text
                        rf"\b{p.name}=['\"]{default}['\"]",                         # split="median"
                        rf"\.get\(['\"]{p.name}['\"], ['\"]?{default}\b",
                        rf"\.get\(['\"]{p.name}['\"]\) or ['\"]?{default}\b"]
            if not isinstance(p.python_default, str):
                patterns.append(rf"\b{p.name}={re.escape(repr(p.python_default))}(?![\w.])")
                # a module constant holding it again: DELTA = 16, DEFAULT_MAX_UNCHANGED = 0.10
                for path, text in sources.items():
                    for m in re.finditer(rf"(?m)^(?:DEFAULT_)?{p.name.upper()}\s*=\s*(-?[\d.]+)$", text):
                        if float(m.group(1)) == float(p.python_default):
                            found.append(f"{path}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0)}")
            for path, text in sources.items():
                for pattern in patterns:
                    for m in re.finditer(pattern, text):
                        if (str(path), p.sql()) not in OTHER_FUNCTIONS:
                            found.append(f"{path}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0)}")
    assert not found, "\n".join(sorted(set(found)))


def test_each_constraint_is_written_once():
    """The allowed values of a choice are spelled only in its declaration."""
    sources = _sources()
    for surface in SURFACES.values():
        for p in surface.parameters:
            if isinstance(p.constraint, parameters.Choice):
                spelled = re.compile(r"\(\s*" + r",\s*".join(f"['\"]{v}['\"]" for v in p.constraint.values))
                hits = [str(path) for path, text in sources.items() if spelled.search(text)]
                assert not hits, (p.name, hits)
