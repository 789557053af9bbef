"""Value generalization hierarchies (VGH): leaf -> parent -> ... -> root.

A hierarchy is given as one path per leaf, ``[leaf, parent, ..., root]`` -- the format of ARX's
``*_hierarchy_*.csv`` files and of Basic_Mondrian's ``adult_*.txt`` files (``;``-separated, one
row per leaf).

Unbalanced input (paths of different lengths, as in Basic_Mondrian's workclass where ``Private;*``
sits next to ``Self-emp-inc;Self-employ;*``) is padded by REPEATING THE LEAF at the bottom of the
short path: ``Private;*`` becomes ``Private;Private;*`` for a height-2 hierarchy. Reading: a value
with no intermediate generalization stays itself until its own path generalizes it, rather than
jumping to the root early (the least information loss). Repeated labels never create tree nodes:
consecutive duplicates inside a path (ARX's own way of padding) collapse into one node.

Leaves are numbered in depth-first order (children in order of first appearance in the input), so
every internal node covers a contiguous range of leaf numbers; the lowest common ancestor (LCA) of
any set of leaves is therefore the LCA of its smallest and largest leaf number, which lets the
Mondrian core generalize whole partitions from two codes.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from itertools import pairwise

import numpy as np

from plpy_anon.core.errors import InvalidParameter, UndefinedObject


class Hierarchy:
    """A value generalization hierarchy (tree); build it with :meth:`from_paths` or :meth:`from_csv`.

    Attributes
    ----------
    leaves : list[str]
        Leaf labels in depth-first order (the code order used by ``encode_categorical``).
    height : int
        Number of generalization levels above the leaves (level 0 = leaf, ``height`` = root).
    root : str
        Label of the root (``"*"`` in the ARX files).
    """

    def __init__(self, labels, parent, children, padded_paths):
        # Private: use the class methods. Arrays are indexed by node id.
        self._labels = labels                      # node id -> label
        self._index = {label: i for i, label in enumerate(labels)}
        self._parent = parent                      # node id -> parent id (-1 for the root)
        self._children = children                  # node id -> list of child ids (input order)
        self.root = labels[0]
        leaf_ids = self._depth_first_leaves()
        self.leaves = [labels[i] for i in leaf_ids]
        self._leaf_number = {label: i for i, label in enumerate(self.leaves)}
        self._leaf_count = self._count_leaves()
        self.height = max(len(p) for p in padded_paths.values()) - 1
        # _ancestors[leaf_number, level] = node id; padded paths so every row reaches the root.
        self._ancestors = np.array(
            [[self._index[x] for x in padded_paths[leaf]] for leaf in self.leaves], dtype=np.int32
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_paths(cls, paths):
        """Build from ``[[leaf, parent, ..., root], ...]`` (one path per leaf).

        Labels are taken literally -- ``" a "`` and ``""`` are labels like any other, as a column
        may hold them -- and ``None`` entries are padding (a NULL-padded SQL array)."""
        cleaned = [_collapse_repeats([str(x) for x in p if x is not None], i)
                   for i, p in enumerate(paths)]
        if not cleaned:
            raise InvalidParameter(
                "the hierarchy has no rows",
                hint="give one path per leaf value: leaf;parent;...;*",
            )
        roots = {p[-1] for p in cleaned}
        if len(roots) != 1:
            raise InvalidParameter(
                f"the hierarchy has several roots: {sorted(roots)}",
                hint="end every row with the same root label, e.g. '*'",
            )
        (root,) = roots
        labels, index, parent, children = [root], {root: 0}, [-1], [[]]
        for row, path in enumerate(cleaned):
            # walk from the root down so a node's id exists before its children refer to it
            for child, par in zip(reversed(path[:-1]), reversed(path[1:])):
                if child == root:
                    raise InvalidParameter(
                        f"the root label {root!r} appears inside row {row + 1}",
                        hint="the root may only be the last label of each row",
                    )
                if child not in index:
                    index[child] = len(labels)
                    labels.append(child)
                    parent.append(index[par])
                    children.append([])
                    children[index[par]].append(index[child])
                elif parent[index[child]] != index[par]:
                    raise InvalidParameter(
                        f"hierarchy node {child!r} has two parents: "
                        f"{labels[parent[index[child]]]!r} and {par!r} (row {row + 1})",
                        hint="every value must generalize to exactly one parent",
                    )
        leaf_rows = {}
        for row, path in enumerate(cleaned):
            leaf = path[0]
            if children[index[leaf]]:
                raise InvalidParameter(
                    f"hierarchy value {leaf!r} is a leaf in row {row + 1} but also generalizes "
                    f"{labels[children[index[leaf]][0]]!r}",
                    hint="a label must be either a data value (leaf) or a generalization",
                )
            leaf_rows.setdefault(leaf, path)
        height = max(len(p) for p in cleaned) - 1
        padded = {leaf: [leaf] * (height + 1 - len(p)) + p for leaf, p in leaf_rows.items()}
        return cls(labels, np.array(parent, dtype=np.int32), children, padded)

    @classmethod
    def from_csv(cls, text_or_path, sep=";"):
        """Build from ARX/Basic_Mondrian text: one ``leaf;parent;...;root`` row per leaf.

        ``text_or_path`` is a path (``os.PathLike``, or a one-line string naming an existing file or
        containing no separator) or the file's text itself. Cells are parsed by :func:`csv_rows`:
        blank lines and empty cells are ignored, a double-quoted cell is taken literally.
        """
        return cls.from_paths(csv_rows(_read_text(text_or_path, sep), sep))

    # ------------------------------------------------------------------ queries
    def ancestor(self, leaf, level):
        """The label of ``leaf`` generalized ``level`` steps (0 = the leaf, ``height`` = root)."""
        if not 0 <= level <= self.height:
            raise InvalidParameter(
                f"hierarchy level {level} is outside 0..{self.height}",
                hint=f"use a level between 0 (the value) and {self.height} (the root)",
            )
        return self._labels[self._ancestors[self.leaf_number(leaf), level]]

    def leaf_count(self, label):
        """Number of leaves under ``label`` (1 for a leaf)."""
        if label not in self._index:
            raise UndefinedObject(
                f"{label!r} is not a label of this hierarchy",
                hint="use one of the hierarchy's leaves or generalizations",
            )
        return int(self._leaf_count[self._index[label]])

    def generalize(self, values):
        """Lowest common ancestor of ``values`` (leaf labels): ``(label, leaf_count)``."""
        numbers = np.array([self.leaf_number(v) for v in values], dtype=np.int32)
        if numbers.size == 0:
            raise InvalidParameter("cannot generalize an empty set of values",
                                   hint="pass at least one leaf value")
        node = self.lca_nodes(numbers.min(keepdims=True), numbers.max(keepdims=True))[0]
        return self._labels[node], int(self._leaf_count[node])

    def leaf_number(self, leaf):
        """Depth-first position of ``leaf`` (its code in an encoded column)."""
        try:
            return self._leaf_number[leaf]
        except KeyError:
            raise UndefinedObject(
                f"value {leaf!r} is not a leaf of the hierarchy",
                hint="add a row for it to the hierarchy file",
            ) from None

    # ------------------------------------------------------------------ vectorized helpers
    def lca_nodes(self, lo_leaf, hi_leaf):
        """Node ids of the LCA of leaf-number ranges ``[lo_leaf, hi_leaf]`` (arrays, same shape).

        Contiguity of subtrees in depth-first order makes the LCA of the range's ends the LCA of
        the whole range. The first level where both padded paths agree is that LCA.
        """
        same = self._ancestors[lo_leaf] == self._ancestors[hi_leaf]
        level = np.argmax(same, axis=-1)           # the root column is always equal
        return self._ancestors[lo_leaf, level]

    def node_labels(self, nodes):
        """Labels of node ids (object array)."""
        return np.asarray(self._labels, dtype=object)[nodes]

    def node_leaf_counts(self, nodes):
        """Leaf counts of node ids."""
        return self._leaf_count[nodes]

    def check_covers(self, values, column):
        """Refuse (42704) values that are no leaf of this hierarchy; see ``uncovered_error``."""
        missing = [v for v in values if v not in self]
        if missing:
            raise uncovered_error(column, missing)

    def __contains__(self, leaf):
        return leaf in self._leaf_number

    def __len__(self):
        return len(self.leaves)

    def __repr__(self):
        return f"Hierarchy(root={self.root!r}, leaves={len(self.leaves)}, height={self.height})"

    # ------------------------------------------------------------------ internals
    def _depth_first_leaves(self):
        leaves, stack = [], [0]
        while stack:
            node = stack.pop()
            kids = self._children[node]
            if kids:
                stack.extend(reversed(kids))
            else:
                leaves.append(node)
        return leaves

    def _count_leaves(self):
        counts = np.zeros(len(self._labels), dtype=np.int64)
        for leaf in self.leaves:
            node = self._index[leaf]
            while node >= 0:
                counts[node] += 1
                node = self._parent[node]
        return counts


def prefix_paths(values, mask="*", step=1):
    """Paths that mask codes from the right, ``step`` characters a level (zip codes, phone
    prefixes, ICD codes): ``53706 -> 5370* -> 537** -> 53*** -> 5**** -> ***** -> *``; codes of
    other lengths get paths of their own length under the same root."""
    if not isinstance(mask, str) or len(mask) != 1:
        raise InvalidParameter(f"the mask {mask!r} is not one character",
                               hint="Pass one character, e.g. mask => '*' or mask => 'X'.")
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise InvalidParameter(f"step must be a positive integer, got {step!r}",
                               hint="It is the number of characters masked per level, e.g. 1.")
    paths = []
    for value in sorted(set(values)):
        width = len(value)
        kept = list(range(width - step, 0, -step)) + [0]
        paths.append([value] + [value[:n] + mask * (width - n) for n in kept if n < width]
                     + [mask])
    labels = {}
    for path in paths:
        for depth, label in enumerate(path[1:-1], start=1):
            labels.setdefault(label, depth)
    clashes = sorted(v for v in {p[0] for p in paths} if v in labels)
    if clashes:
        raise InvalidParameter(
            f"value(s) {', '.join(map(repr, clashes[:3]))} already look masked, so they would be "
            "both a value and a generalization of other values",
            hint="Pick a mask character the column never holds, e.g. mask => '#'.")
    return paths


#: the finest width an interval hierarchy takes, relative to its values' magnitude: finer widths
#: give labels of more significant digits than any float8 or decimal computation over the release
#: tells apart (and every value its own interval)
INTERVAL_DIGITS = 28


def _exact_text(value: Fraction) -> str:
    """A number of finite decimal expansion as plain digits (40, 2.5, -0.25), exactly."""
    twos = fives = 0
    denominator = value.denominator
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    places = max(twos, fives)
    scaled = abs(value.numerator) * 10 ** places // value.denominator
    digits = str(scaled).rjust(places + 1, "0")
    text = digits if places == 0 else f"{digits[:-places]}.{digits[-places:]}".rstrip("0").rstrip(".")
    return "-" + text if value < 0 and text != "0" else text


def interval_paths(values, widths, origin=0):
    """Paths that generalize numbers into nested intervals, one level per width:
    ``42 -> [40,45) -> [40,50) -> [40,60) -> *`` for widths 5, 10, 20 from origin 0.

    ``values`` are ``(text, number)`` pairs: the text is the leaf (the value as the column is
    read), the number (``Decimal``, ``int`` or ``float``) places it. Intervals are closed below and
    open above, aligned on ``origin``; each width is a multiple of the one before, so that every
    interval lies inside one interval of the next level (a hierarchy is a tree). Bounds are
    computed exactly (rational arithmetic), whatever the number of digits."""
    from decimal import Decimal, InvalidOperation
    if widths is None or len(widths) == 0:
        raise InvalidParameter("widths is empty",
                               hint="Give the interval widths from the finest up, e.g. ARRAY[5, 10, 20].")
    if any(w is None for w in widths) or origin is None:
        raise InvalidParameter("widths and origin must not be NULL",
                               hint="E.g. widths => ARRAY[5, 10, 20], origin => 0.")
    try:
        given = [Decimal(str(w)) for w in widths]
        start = Decimal(str(origin))
    except (InvalidOperation, TypeError, ValueError):
        raise InvalidParameter(f"widths {[str(w) for w in widths]} and origin {origin} must be "
                               "numbers", hint="E.g. widths => ARRAY[5, 10, 20], origin => 0.") from None
    if any(not w.is_finite() or w <= 0 for w in given) or not start.is_finite():
        raise InvalidParameter(f"widths must be positive numbers and origin finite, got widths "
                               f"{[str(w) for w in given]} and origin {start}",
                               hint="E.g. widths => ARRAY[5, 10, 20] (NULL is not a width).")
    steps = [Fraction(w) for w in given]
    for finer, coarser in pairwise(steps):
        if coarser <= finer or coarser % finer != 0:
            raise InvalidParameter(
                f"width {_exact_text(coarser)} is not a multiple of the width "
                f"{_exact_text(finer)} before it, so its intervals would cut the finer ones",
                hint="List widths from the finest up, each a multiple of the one before: 5, 10, 20.")
    placed = [(text, Decimal(str(number))) for text, number in values]
    for text, value in placed:
        if not value.is_finite():
            raise InvalidParameter(f"the value {text!r} has no interval",
                                   hint="NaN and infinities cannot be placed in an interval: "
                                        "exclude them from the column, or release it as ranges.")
    low_end = Fraction(start)
    exact = [(text, Fraction(value)) for text, value in placed]
    largest = max((abs(value - low_end) for _, value in exact), default=Fraction(0))
    if largest > steps[0] * 10 ** INTERVAL_DIGITS:
        magnitude = len(str(int(largest))) - 1
        raise InvalidParameter(
            f"width {_exact_text(steps[0])} is too fine for values up to about 10^{magnitude} "
            f"from the origin: an interval's bounds would need more than {INTERVAL_DIGITS} "
            "significant digits",
            hint=f"Give a finest width of at least 1e{magnitude - INTERVAL_DIGITS} (or an origin "
                 "near the values), or exclude the outlying values from the column.")
    paths = []
    for text, value in sorted(exact, key=lambda pair: pair[1]):
        path = [text]
        for width in steps:
            low = low_end + math.floor((value - low_end) / width) * width
            path.append(f"[{_exact_text(low)},{_exact_text(low + width)})")
        paths.append(path + ["*"])
    return paths


#: date rounding units, finest first, and the label each gives a (year, month, day)
DATE_UNITS = {
    "day": lambda y, m, d: f"{y:04d}-{m:02d}-{d:02d}",
    "month": lambda y, m, d: f"{y:04d}-{m:02d}",
    "quarter": lambda y, m, d: f"{y:04d}-Q{(m - 1) // 3 + 1}",
    "year": lambda y, m, d: f"{y:04d}",
    "decade": lambda y, m, d: f"{y - y % 10:04d}s",
}


def date_paths(values, levels=("month", "year")):
    """Paths that round dates (or timestamps) to the calendar units ``levels``, finest first:
    ``2024-03-15 -> 2024-03 -> 2024 -> *`` for month, year. ``values`` are
    ``(text, year, month, day)``: the text is the leaf, as the column is read."""
    if levels is None or len(levels) == 0:
        raise InvalidParameter("levels is empty", hint="E.g. levels => ARRAY['month', 'year'].")
    order = list(DATE_UNITS)
    units = [str(u).strip().lower() if u is not None else None for u in levels]
    unknown = [u for u in units if u not in DATE_UNITS]
    if unknown:
        raise InvalidParameter(f"unknown date level(s) {unknown!r}",
                               hint=f"Levels are {', '.join(order)}, finest first.")
    ranks = [order.index(u) for u in units]
    if any(b <= a for a, b in pairwise(ranks)):
        raise InvalidParameter(f"levels {units!r} are not from the finest to the coarsest",
                               hint=f"Order them as {', '.join(order)} (each at most once).")
    paths = []
    for text, year, month, day in sorted(values, key=lambda v: (v[1], v[2], v[3])):
        if any(part is None for part in (year, month, day)) or any(
                not float(part).is_integer() for part in (year, month, day)):
            raise InvalidParameter(f"the value {text!r} has no calendar date",
                                   hint="infinity and -infinity cannot be rounded: exclude them "
                                        "from the column, or release it as ranges.")
        y, m, d = int(year), int(month), int(day)
        paths.append([text] + [DATE_UNITS[u](y, m, d) for u in units] + ["*"])
    return paths


def csv_rows(text, sep=";"):
    """Rows of hierarchy CSV text (ARX style, one ``leaf;parent;...;root`` line per leaf).

    An unquoted cell is stripped of surrounding spaces, and an empty one is padding (ignored), as
    in ARX's files. A cell in double quotes is taken literally, for labels a column really holds:
    ``" Private"`` keeps its leading space, ``""`` is the empty string, ``""`` inside quotes is
    one quote. Blank lines are ignored.

    Hand-written on purpose: the ``csv`` module takes one-character delimiters
    only (``sep="||"`` is accepted here) and, before Python 3.12's ``QUOTE_NOTNULL`` reader, reads
    ``""`` and padding alike as ``''``.
    """
    if not isinstance(sep, str) or not sep or '"' in sep or "\n" in sep or "\r" in sep:
        raise InvalidParameter(
            f"the hierarchy separator {sep!r} cannot be used",
            hint="use a non-empty separator without quotes or line breaks, e.g. ';' or ','",
        )
    rows = []
    for number, line in enumerate(str(text).lstrip("\ufeff").splitlines(), start=1):
        cells = _split_cells(line, sep, number)
        if cells:
            rows.append(cells)
    return rows


def _split_cells(line, sep, number):
    cells, i, n = [], 0, len(line)
    while i <= n:
        j = i
        while j < n and line[j].isspace() and not line.startswith(sep, j):
            j += 1
        if j < n and line[j] == '"':
            value, k = [], j + 1
            while True:
                if k >= n:
                    raise InvalidParameter(
                        f"hierarchy line {number} has an unterminated quoted cell: {line!r}",
                        hint='close the cell with a double quote; write "" for a quote inside it',
                    )
                if line[k] == '"':
                    if line.startswith('"', k + 1):
                        value.append('"')
                        k += 2
                        continue
                    k += 1
                    break
                value.append(line[k])
                k += 1
            while k < n and line[k].isspace() and not line.startswith(sep, k):
                k += 1
            if k < n and not line.startswith(sep, k):
                raise InvalidParameter(
                    f"hierarchy line {number} has text after a quoted cell: {line!r}",
                    hint=f"a quoted cell must be followed by the separator {sep!r} or the line end",
                )
            cells.append("".join(value))
            end = k
        else:
            end = line.find(sep, i)
            end = n if end < 0 else end
            cell = line[i:end].strip()
            if cell:
                cells.append(cell)
        i = end + len(sep)
    return cells


def _collapse_repeats(path, row):
    """Drop consecutive duplicates (ARX pads short paths by repeating a label); reject cycles."""
    out = [x for i, x in enumerate(path) if i == 0 or x != path[i - 1]]
    if len(out) < 2:
        raise InvalidParameter(
            f"hierarchy row {row + 1} ({';'.join(path)!r}) has no generalization",
            hint="write each row as leaf;parent;...;root",
        )
    if len(set(out)) != len(out):
        raise InvalidParameter(
            f"hierarchy row {row + 1} ({';'.join(path)!r}) repeats a label (a cycle)",
            hint="a label may appear only once on a path from leaf to root",
        )
    return out


def _read_text(text_or_path, sep):
    if isinstance(text_or_path, os.PathLike) or (
        isinstance(text_or_path, str)
        and "\n" not in text_or_path
        and (sep not in text_or_path or os.path.isfile(text_or_path))
    ):
        try:
            with open(text_or_path, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            raise UndefinedObject(
                f"hierarchy file {os.fspath(text_or_path)!r} does not exist",
                hint="pass an existing path or the hierarchy text itself",
            ) from None
    return str(text_or_path)


def uncovered_error(column, missing) -> UndefinedObject:
    """The error for ``missing`` values of ``column`` outside its hierarchy. Its message, which
    a failed refresh records where every custodian reads it, counts them; only its detail, shown
    to the caller alone, names them."""
    shown = ", ".join(repr(v) for v in missing[:5]) + (", ..." if len(missing) > 5 else "")
    return UndefinedObject(
        f"the hierarchy of column {column!r} does not cover {len(missing)} value(s) present in the "
        "table",
        detail=f"Values not covered: {shown}",
        hint="Call the builder again (anon.set_hierarchy_intervals, anon.set_hierarchy_dates, "
             "anon.set_hierarchy_prefix) to cover the values the table holds now, or register "
             "a path (leaf, parent, ..., root) for each with anon.set_hierarchy.")
