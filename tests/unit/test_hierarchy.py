"""Value generalization hierarchies: every shipped ARX / Basic_Mondrian file loads, padding of
unbalanced paths, LCA against a brute-force walk, and errors naming the offending node."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.errors import InvalidParameter, UndefinedObject
from plpy_anon.core.hierarchy import Hierarchy, csv_rows, prefix_paths

# the ARX and Basic_Mondrian hierarchies shipped with the package (see their README)
DATA = Path(__file__).resolve().parents[2] / "plpy_anon" / "data" / "hierarchies"
FILES = sorted((DATA / "arx_adult").glob("*.csv")) + \
    sorted((DATA / "basic_mondrian_adult").glob("*.txt"))
assert len(FILES) == 16, "the shipped hierarchy files are missing"


def _rows(path):
    return [line.split(";") for line in path.read_text().splitlines() if line.strip()]


def _brute_force_lca(tree, leaves):
    """Lowest level at which all leaves share an ancestor, by walking every leaf's path."""
    for level in range(tree.height + 1):
        names = {tree.ancestor(leaf, level) for leaf in leaves}
        if len(names) == 1:
            return names.pop()
    raise AssertionError("no common ancestor")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_shipped_file_loads(path):
    rows = _rows(path)
    tree = Hierarchy.from_csv(path)
    assert sorted(tree.leaves) == sorted(r[0] for r in rows)
    assert tree.height == max(len(r) for r in rows) - 1
    assert tree.root == "*" and tree.leaf_count("*") == len(rows)
    for row in rows:                               # each row's own path is reproduced on top
        for offset, label in enumerate(reversed(row)):
            assert tree.ancestor(row[0], tree.height - offset) == label


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_subtrees_are_contiguous_in_leaf_order(path):
    # the property Mondrian relies on: the leaves under any node form one run of leaf numbers
    tree = Hierarchy.from_csv(path)
    for level in range(tree.height + 1):
        groups = [tree.ancestor(leaf, level) for leaf in tree.leaves]
        runs = [g for i, g in enumerate(groups) if i == 0 or g != groups[i - 1]]
        assert len(runs) == len(set(runs))


def test_education_lca_and_leaf_counts():
    tree = Hierarchy.from_csv(DATA / "arx_adult" / "adult_hierarchy_education.csv")
    assert tree.generalize(["Bachelors", "Some-college"]) == ("Undergraduate", 2)
    # Higher education: Bachelors, Some-college, Prof-school, Assoc-acdm, Assoc-voc, Masters,
    # Doctorate
    assert tree.generalize(["Bachelors", "Masters"]) == ("Higher education", 7)
    assert tree.generalize(["Preschool", "Doctorate"]) == ("*", 16)
    assert tree.generalize(["9th"]) == ("9th", 1)
    assert tree.ancestor("9th", 1) == "High School"


def test_age_hierarchy_bands():
    tree = Hierarchy.from_csv(DATA / "arx_adult" / "adult_hierarchy_age.csv")
    assert tree.height == 4 and len(tree.leaves) == 100
    assert [tree.ancestor("37", h) for h in range(5)] == ["37", "35-39", "30-39", "20-39", "*"]
    assert tree.generalize(["21", "38"]) == ("20-39", 20)


def test_unbalanced_paths_are_padded_by_repeating_the_leaf():
    tree = Hierarchy.from_csv(DATA / "basic_mondrian_adult" / "adult_workclass.txt")
    assert tree.height == 2
    assert [tree.ancestor("Private", h) for h in range(3)] == ["Private", "Private", "*"]
    assert [tree.ancestor("Local-gov", h) for h in range(3)] == ["Local-gov", "gov", "*"]
    assert tree.generalize(["Private", "Self-emp-inc"]) == ("*", 8)


def test_arx_style_repeated_labels_collapse():
    tree = Hierarchy.from_paths([["a", "a", "X", "*"], ["b", "Y", "X", "*"], ["c", "Y", "X", "*"]])
    assert tree.leaf_count("X") == 3 and tree.leaf_count("Y") == 2
    assert tree.generalize(["a", "b"]) == ("X", 3)
    assert tree.generalize(["b", "c"]) == ("Y", 2)


def test_leaves_depth_first_in_input_order():
    tree = Hierarchy.from_paths([["a", "A", "*"], ["x", "*"], ["b", "B", "*"], ["a2", "A", "*"]])
    assert tree.leaves == ["a", "a2", "x", "b"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(FILES) if FILES else st.nothing(), st.data())
def test_generalize_equals_brute_force(path, data):
    tree = Hierarchy.from_csv(path)
    leaves = data.draw(st.lists(st.sampled_from(tree.leaves), min_size=1, max_size=6))
    label, count = tree.generalize(leaves)
    assert label == _brute_force_lca(tree, leaves)
    assert count == sum(1 for leaf in tree.leaves
                        if label in {tree.ancestor(leaf, h) for h in range(tree.height + 1)})


def test_vectorized_lca_matches_generalize():
    tree = Hierarchy.from_csv(DATA / "arx_adult" / "adult_hierarchy_native-country.csv")
    lo, hi = np.array([0, 3, 10]), np.array([0, 20, 40])
    got = tree.node_labels(tree.lca_nodes(lo, hi))
    want = [tree.generalize(tree.leaves[a:b + 1])[0] for a, b in zip(lo, hi)]
    assert got.tolist() == want


def test_text_and_path_inputs_agree(tmp_path):
    text = "a;A;*\nb;A;*\n\nc;*;\n"
    path = tmp_path / "h.csv"
    path.write_text(text)
    for source in (text, path, str(path)):
        tree = Hierarchy.from_csv(source)
        assert tree.leaves == ["a", "b", "c"] and tree.height == 2


def test_other_separator():
    assert Hierarchy.from_csv("a,A,*\nb,*", sep=",").generalize(["a", "b"]) == ("*", 2)


# ---------------------------------------------------------------------- bad input
def test_node_with_two_parents_is_named():
    with pytest.raises(InvalidParameter, match="'x' has two parents: 'A' and 'B'"):
        Hierarchy.from_paths([["a", "x", "A", "*"], ["b", "x", "B", "*"]])


def test_leaf_with_two_parents_is_named():
    with pytest.raises(InvalidParameter, match="'a' has two parents"):
        Hierarchy.from_paths([["a", "A", "*"], ["a", "B", "*"]])


def test_several_roots():
    with pytest.raises(InvalidParameter, match="several roots"):
        Hierarchy.from_paths([["a", "*"], ["b", "ALL"]])


def test_value_that_is_also_a_generalization():
    with pytest.raises(InvalidParameter, match="'A' is a leaf .* but also generalizes 'a'"):
        Hierarchy.from_paths([["a", "A", "*"], ["A", "*"]])


def test_row_without_generalization_and_cycles():
    with pytest.raises(InvalidParameter, match="row 2 .* has no generalization"):
        Hierarchy.from_paths([["a", "*"], ["b"]])
    with pytest.raises(InvalidParameter, match="cycle"):
        Hierarchy.from_paths([["a", "A", "a", "*"]])


def test_unknown_leaf_and_missing_file():
    tree = Hierarchy.from_paths([["a", "*"], ["b", "*"]])
    with pytest.raises(UndefinedObject, match="'zz' is not a leaf"):
        tree.generalize(["a", "zz"])
    with pytest.raises(UndefinedObject, match="does not exist"):
        Hierarchy.from_csv("/nonexistent/hierarchy.csv")
    with pytest.raises(InvalidParameter, match="level 5 is outside 0..1"):
        tree.ancestor("a", 5)


def test_csv_rows_quoted_cells_are_literal():
    text = '" a ";A;*\n a ; A ;*;;\n"";B;*\n"say ""hi""";B;*\n\n'
    assert csv_rows(text) == [[" a ", "A", "*"], ["a", "A", "*"], ["", "B", "*"],
                              ['say "hi"', "B", "*"]]
    assert csv_rows("x||y||*", sep="||") == [["x", "y", "*"]]


def test_labels_are_literal_in_paths():
    tree = Hierarchy.from_paths([[" a ", "A", "*"], ["a", "A", "*"], ["", "B", None, "*"]])
    assert tree.leaves == [" a ", "a", ""]
    assert tree.generalize([" a ", "a"]) == ("A", 2)
    assert tree.ancestor("", 1) == "B"


@pytest.mark.parametrize("sep", ["", '"', "\n"])
def test_csv_rows_refuses_unusable_separators(sep):
    with pytest.raises(InvalidParameter, match="separator"):
        csv_rows("a;*", sep)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="0123456789", min_size=1, max_size=6), min_size=1, max_size=30),
       st.integers(1, 3))
def test_prefix_paths_mask_each_code_from_the_right(codes, step):
    paths = prefix_paths(codes, "*", step)
    assert sorted(p[0] for p in paths) == sorted(set(codes))
    hierarchy = Hierarchy.from_paths(paths)
    assert set(hierarchy.leaves) == set(codes) and hierarchy.root == "*"
    for path in paths:
        value = path[0]
        assert path[-1] == "*"
        kept = [len(label.rstrip("*")) for label in path[1:-1]]
        assert kept == sorted(kept, reverse=True) and len(set(kept)) == len(kept)
        for label in path[1:-1]:
            assert len(label) == len(value) and value.startswith(label.rstrip("*"))
