"""The suite's two runs (docs/development.md, "Set up, build, test"):

- the default run (``pytest tests``, ``make test-fast``): every test not marked ``slow``, property
  tests at their everyday example counts;
- the slow run (``make test-slow``, which sets ``PLPY_ANON_TESTS=slow``): the tests marked
  ``slow`` and the property tests marked ``more_examples``, these at their full count.

``make test`` (the README's command, which CI runs) runs the default run, then the slow one.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

SLOW_RUN = os.environ.get("PLPY_ANON_TESTS") == "slow"


def examples(default: int, slow: int):
    """Decorator of an expensive property test (above ``@given``): ``default`` examples in the
    default run, ``slow`` in the slow run, which selects it by its ``more_examples`` marker."""
    def decorate(test):
        test = settings(max_examples=slow if SLOW_RUN else default, deadline=None)(test)
        return pytest.mark.more_examples(test)
    return decorate
