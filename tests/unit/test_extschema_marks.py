"""The extension's schema goes only into the text the code wrote: user text (marked) comes out of
the rewriting exactly as it went in, without its marks, and the default install marks nothing."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plpy_anon.db import extschema

MARKS = extschema.OPEN + extschema.CLOSE
user_text = st.text(st.characters(blacklist_characters=MARKS), max_size=40)


@pytest.fixture
def in_pa():
    extschema.use("pa", None)
    try:
        yield
    finally:
        extschema.use(extschema.DEFAULT, None)


@given(name=user_text)
def test_marked_user_text_is_never_rewritten_and_loses_its_marks(name):
    extschema.use("pa", None)
    try:
        code = "SELECT anon.refresh(" + extschema.user(name) + ") FROM anon.releases"
        assert extschema.sql(code) == f"SELECT pa.refresh({name}) FROM pa.releases"
        assert extschema.unmarked([{"n": extschema.user(name)}, (extschema.user(name),)]) == [
            {"n": name}, (name,)]
    finally:
        extschema.use(extschema.DEFAULT, None)


def test_a_marked_template_filled_with_marked_names_stays_user_text(in_pa):
    grant = extschema.user("GRANT SELECT ON %s TO bob") % extschema.user("anon.versions")
    assert extschema.sql(f"{grant}; SELECT anon.refresh('x')") == (
        "GRANT SELECT ON anon.versions TO bob; SELECT pa.refresh('x')")


@given(name=user_text)
def test_the_default_install_marks_and_rewrites_nothing(name):
    extschema.use(extschema.DEFAULT, None)
    assert extschema.user(name) is name
    assert extschema.sql(f"SELECT anon.refresh({name})") == f"SELECT anon.refresh({name})"
