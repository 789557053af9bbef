"""Adversarial: a stable release whose people all change at once (every identifier rewritten, or
the table emptied and filled with new people). The refresh that sees it publishes a version of
no rows (every group lost all its people, every joiner held back); the refreshes after it must
go on publishing, checked from the released rows, not refuse for good with an internal error."""
from __future__ import annotations

import psycopg

from tests.helpers import class_sizes, create_release, distinct_sensitive_per_class

ROWS = ("INSERT INTO pt SELECT g, %s || g, g, (ARRAY['flu','hiv','cold'])[1 + g %% 3] "
        "FROM generate_series(1, 60) g")


def refreshes_after_turnover(db, schema, turnover: list[str]) -> list:
    """Each refresh's outcome after ``turnover``, then two refreshes of an unchanged table: the
    released rows' smallest class and fewest distinct values, or the error (SQLSTATE, hint)."""
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, code text NOT NULL UNIQUE, age int, dx text)")
    db.execute(ROWS, ("C",))
    release = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=["age"],
                             sensitive=["dx"], identifiers=["code"], refresh_mode="stable")
    outcomes = []
    for statement in [*turnover, None, None]:
        if statement:
            db.execute(statement, ("D",) if "%s" in statement else None)
        try:
            db.execute("SELECT anon.refresh(%s)", (release,))
        except psycopg.Error as refused:
            outcomes.append((refused.diag.sqlstate, refused.diag.message_hint))
            continue
        sizes = class_sizes(db, release, ["age"])
        outcomes.append((min(sizes, default=None),
                         min(distinct_sensitive_per_class(db, release, ["age"], "dx"), default=None)))
    return outcomes


def published_safely(outcomes: list) -> bool:
    """Every refresh published (no error) and every non-empty version holds k = 3 and l = 2."""
    refused = [o for o in outcomes if isinstance(o[0], str)]
    return not refused and all(o[0] is None or (o[0] >= 3 and o[1] >= 2) for o in outcomes)


def test_refreshes_go_on_after_every_identifier_changed(db, schema):
    """Every row's identifier rewritten (code = code || 'x'): the refresh publishes no rows
    (everyone new, held back); the next ones, of the unchanged table, publish them in classes
    of k and l (the groups they were held back in kept, not split)."""
    outcomes = refreshes_after_turnover(db, schema, ["UPDATE pt SET code = code || 'x'"])
    assert published_safely(outcomes), outcomes


def test_refreshes_go_on_after_the_table_was_replaced_by_new_people(db, schema):
    """Every person deleted and 60 new ones inserted in one transaction (the same ages and
    values, new identifiers): no rows published, then classes of k and l on every refresh."""
    outcomes = refreshes_after_turnover(db, schema, ["DELETE FROM pt; " + ROWS.replace("%%", "%")
                                                     .replace("%s", "'D'")])
    assert published_safely(outcomes), outcomes


def test_refreshes_go_on_after_half_the_identifiers_changed(db, schema):
    """Half the identifiers rewritten: every refresh publishes, k and l hold."""
    outcomes = refreshes_after_turnover(db, schema, ["UPDATE pt SET code = code || 'x' WHERE id <= 30"])
    assert published_safely(outcomes), outcomes


def test_people_held_back_by_a_whole_turnover_are_published_in_small_classes(db, schema):
    """After every identifier changed, the people held back are published in the classes of an
    ordinary partition (60 rows, k = 3; the smallest class released is smaller than 60), not in
    one class of everyone, which groups never split out of."""
    outcomes = refreshes_after_turnover(db, schema, ["UPDATE pt SET code = code || 'x'"])
    assert published_safely(outcomes), outcomes
    assert all(o[0] is not None and o[0] < 60 for o in outcomes[1:]), outcomes
