"""Pattern-preserving release: keep locality properties, substitute values by a
random walk in the polytope they define.

* :mod:`.localities` -- pruned locality extraction per sorted segment, sampling, constraint rows;
* :mod:`.walk`       -- hit-and-run random walk in ``{A x <= b, lower <= x <= upper}``;
* :mod:`.release`    -- the whole-table driver :class:`PatternPreservingRelease`;
* :mod:`.metrics`    -- distortion ``Dst``, rank correlation, fraction of localities preserved.
"""

from plpy_anon.core.pattern.localities import (
                                               Localities,
                                               constraint_matrix,
                                               extract_localities,
                                               sample_localities,
)
from plpy_anon.core.pattern.metrics import (
                                               distortion,
                                               distortion_per_column,
                                               preserved_fraction,
                                               rank_correlation,
                                               unchanged_fraction,
)
from plpy_anon.core.pattern.release import PatternPreservingRelease, release_column
from plpy_anon.core.pattern.walk import Blocks, polytope_violation, random_walk

__all__ = [
    "Blocks", "Localities", "PatternPreservingRelease", "constraint_matrix", "distortion",
    "distortion_per_column", "extract_localities", "polytope_violation", "preserved_fraction",
    "random_walk", "rank_correlation", "release_column", "sample_localities",
    "unchanged_fraction",
]
