"""A release's specification (plpy_anon.spec): decoded once from the catalog row or the SQL call,
validated by the declarations, encoded back to the same jsonb; db/ reads its attributes, not
string keys."""
from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import plpy_anon
from plpy_anon.core.errors import InvalidParameter
from plpy_anon.spec import BreakMergeSettings, Built, Promise, ReleaseSpec

# catalog rows as 0.1.0 wrote them: no layout, refresh_mode, joined_back (their rows join back)
MONDRIAN_0_1 = {"k": 5, "l": None, "l_diversity": "distinct", "c": None, "t": None,
                "split": "median", "ordered_sensitive": ["salary"],
                "quasi_identifiers": ["age", "zip"], "sensitive": ["salary"],
                "hierarchies": ["zip"], "released": ["age", "zip", "salary"], "dropped": ["name"]}
BREAK_MERGE_0_1 = {"k": 4, "l": 2, "max_categories": 64, "max_rule_probability": None,
                   "rule_max_parents": 2, "quasi_identifiers": ["age"], "sensitive": ["dx"],
                   "hierarchies": [], "qit": "t_bm_qit", "merged": "t_bm_merged",
                   "sensitive_tables": {"dx": "t_bm_st_dx"},
                   "objects": ["t_bm_merged", "t_bm_st_dx", "t_bm_qit"]}
TRUST_0_1 = {"requester": "ann", "purpose": "audit", "k": None, "max_suppression": 0.05,
             "gamma": 2, "d_min": 0, "d_max": 1, "history_weight": 0.5,
             "half_life_days": None, "min_share": 0.1, "level_weights": None,
             "priorities": {"age": 1.0}, "quasi_identifiers": ["age"], "sensitive": []}
FUSION = {"k": 7, "identifier": "id", "sensitive": "salary", "attributes": ["age", "hours"],
          "released": ["id", "age", "hours"], "dropped": [], "k_from": 2, "k_to": 30,
          "verdict": {"verdict": "protected"}, "accept_unprotected": False,
          "scan": [{"k": 2}, {"k": 7}]}
ROWS = {"mondrian": MONDRIAN_0_1, "break_merge": BREAK_MERGE_0_1, "trust": TRUST_0_1,
        "fusion": FUSION}


@pytest.mark.parametrize("method", sorted(ROWS))
def test_a_catalog_row_encodes_back_to_itself(method):
    assert ReleaseSpec.decode(method, ROWS[method]).encode() == ROWS[method]


def test_a_row_of_the_first_version_gets_the_defaults_of_what_it_lacks():
    spec = ReleaseSpec.decode("mondrian", MONDRIAN_0_1)
    assert spec.promise == Promise(k=5, quasi_identifiers=("age", "zip"), sensitive=("salary",))
    assert spec.promise.refresh_mode is None and spec.promise.layout is None
    assert spec.built.joined_back is True and spec.built.hierarchies == ("zip",)
    assert spec.settings.split == "median"
    assert ReleaseSpec.decode("trust", TRUST_0_1).settings.half_life_days is None   # no decay


def test_the_method_settings_are_typed():
    spec = ReleaseSpec.decode("break_merge", BREAK_MERGE_0_1)
    assert spec.settings == BreakMergeSettings(qit="t_bm_qit", merged="t_bm_merged",
                                               sensitive_tables={"dx": "t_bm_st_dx"})
    assert spec.built == Built(objects=("t_bm_merged", "t_bm_st_dx", "t_bm_qit"))
    assert spec.promise.l == 2 and spec.promise.k == 4
    fusion = ReleaseSpec.decode("fusion", FUSION)
    assert fusion.promise.sensitive == ("salary",) and fusion.settings.attributes == ("age", "hours")


@given(st.integers(min_value=-3, max_value=1))
def test_a_stored_k_below_the_minimum_is_refused_when_decoded(k):
    with pytest.raises(InvalidParameter, match=f"k must be at least 2, got {k}"):
        ReleaseSpec.decode("mondrian", {**MONDRIAN_0_1, "k": k})
    # unchecked, as the verification reads it: the promise as stored, for it to refuse
    assert ReleaseSpec.decode("mondrian", {**MONDRIAN_0_1, "k": k}, checked=False).promise.k == k


def test_a_changed_value_is_encoded_in_the_stored_format():
    spec = ReleaseSpec.decode("fusion", FUSION)
    changed = replace(spec, promise=replace(spec.promise, k=9, refresh_mode="fresh"))
    assert changed.encode() == {**FUSION, "k": 9, "refresh_mode": "fresh"}
    assert changed.encode()["sensitive"] == "salary"          # fusion's one column, as text


# ------------------------------------------------------------------ string keys in db/

DB = Path(plpy_anon.__file__).parent / "db"
#: string-key look-ups of release parameters left in db/: where the parameters are still a dict
#: (the catalog row a resolve is building, the stable mode's salt, the storage and objects
#: helpers); only goes down
CEILING = 6


def parameter_lookups(root: Path = DB) -> list[tuple[str, int, str]]:
    """(file, line, key) of every ``x["key"]`` / ``x.get("key")`` whose receiver holds release
    parameters (a name containing ``param`` or ``stored``, or ``values``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            target = key = None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                    and isinstance(node.slice.value, str):
                target, key = node.value, node.slice.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("get", "pop", "setdefault") and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                target, key = node.func.value, node.args[0].value
            if target is None:
                continue
            receiver = ast.unparse(target)
            if "param" in receiver or "stored" in receiver or receiver == "values":
                found.append((path.relative_to(root).as_posix(), node.lineno, key))
    return found


def test_db_reads_release_parameters_by_key_no_more_than_the_ceiling():
    assert len(parameter_lookups()) <= CEILING
