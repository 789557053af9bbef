"""k is checked in three places on purpose, with one minimum: the declaration
(``parameters.K``), the core's guard (``core.k_anonymity.check_k``) and the verification of the
released rows (``db.verify.check``). Any other comparison of k with a number or a row count is a
fourth check that may disagree with them."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import plpy_anon
from plpy_anon import parameters
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.k_anonymity import MIN_K, check_k

PACKAGE = Path(plpy_anon.__file__).parent
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
CHECKS = {("core/k_anonymity.py", "check_k"), ("db/verify.py", "check")}
#: the algorithms' cut rules compare a side's rows with k (what k-anonymity means), not k's value
RULES = {("core/regions.py", "allowable")}


def _is_k(node) -> bool:
    return (isinstance(node, ast.Name) and node.id == "k") or \
        (isinstance(node, ast.Attribute) and node.attr == "k")


def _is_bound(node) -> bool:
    """A number, the minimum, or a count of rows (``n_rows``, ``data.n_rows``, ``len(...)``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return True
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) \
        else None
    if name is not None:
        return name == "MIN_K" or "rows" in name
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"


def k_checks(root: Path = PACKAGE) -> set[tuple[str, str]]:
    """(file, function) of every ordering comparison of k with a number, MIN_K or a row count."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Compare) and all(isinstance(o, ORDERING) for o in node.ops):
                    operands = [node.left, *node.comparators]
                    if any(map(_is_k, operands)) and any(_is_bound(o) for o in operands
                                                         if not _is_k(o)):
                        found.add((path.relative_to(root).as_posix(), function.name))
    return found


def test_k_is_compared_with_a_bound_in_the_core_guard_and_the_verification_only():
    assert k_checks() - RULES == CHECKS


def test_the_minimum_is_read_by_the_three_checks_only():
    readers = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Name) and n.id == "MIN_K" and isinstance(n.ctx, ast.Load)
               for n in ast.walk(tree)):
            readers.add(path.relative_to(PACKAGE).as_posix())
    assert readers == {"parameters.py", "core/k_anonymity.py", "db/verify.py"}


def test_every_method_declares_k_with_the_one_minimum():
    """Every release method's k (and fusion's smallest scanned k) refuses what the core refuses."""
    declared = {(s.method, p.name): p for s in parameters.SURFACES.values() for p in s.parameters
                if p.name in ("k", "k_from")}
    assert {m for m, _ in declared} == set(parameters.SURFACES) - {"pattern"}
    for (method, name), p in declared.items():
        assert p.constraint.low == MIN_K and p.constraint.integer, (method, name)
    assert {declared[m, "k"].hint for m, _ in declared if (m, "k") in declared} == {
        parameters.K.hint}


@given(st.integers(min_value=-5, max_value=60), st.integers(min_value=0, max_value=50))
def test_the_declaration_and_the_core_guard_agree(k, n_rows):
    try:
        declared = parameters.K.check(k)
    except InvalidParameter as refused:
        with pytest.raises(InvalidParameter) as guarded:
            check_k(k, n_rows)
        assert (guarded.value.message, guarded.value.hint, guarded.value.sqlstate) == \
            (refused.message, refused.hint, refused.sqlstate)
        return
    if k > n_rows:
        with pytest.raises(InsufficientData, match=f"has {n_rows} rows, fewer than k = {k}"):
            check_k(k, n_rows)
    else:
        assert check_k(k, n_rows) == declared == k
