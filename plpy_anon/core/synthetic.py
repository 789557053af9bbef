"""A synthetic enterprise data set for the fusion-attack experiment (no real payroll ships here).

The FRED paper's data (faculty salaries + performance reviews + facts from their web pages) is
not public, so the experiment uses employees generated to have the same structure:

* a latent ``ability`` drives three performance scores ``perf_1..perf_3`` (1-10, noisy) and the
  chance of a senior title;
* ``salary`` = base pay of the title x a raise for performance x lognormal noise;
* the web facts an insider can find: the ``title`` and the ``holdings`` (property value, in
  thousands), which grow with salary, with a lot of noise; only a fraction of the employees has a
  findable web page, and the web also returns people who are not employees (unmatched rows).

The release contains ``perf_1..perf_3`` (microaggregated); an attacker fuses it with the web facts.
"""

import numpy as np
import pandas as pd

from plpy_anon.core.errors import InvalidParameter

TITLES = ("assistant", "associate", "senior", "manager", "director", "vice president")
BASE_SALARY = np.array([42_000, 55_000, 70_000, 88_000, 115_000, 160_000], dtype=float)


def _names(prefix, count, rng):
    # Unique, stable, name-like identifiers (a real table would have real names).
    first = np.array(["ana", "ben", "chen", "dana", "eli", "fatma", "goran", "hana", "ivan", "jo"])
    picks = first[rng.integers(0, len(first), count)]
    return [f"{p}-{prefix}{i:05d}" for i, p in enumerate(picks)]


def make_enterprise(n_employees=3000, web_coverage=0.85, n_strangers=50, random_state=0):
    """Return ``(employees, web_facts)`` DataFrames.

    employees: name, perf_1, perf_2, perf_3, salary.
    web_facts: name, title, holdings -- for ``web_coverage`` of the employees plus
    ``n_strangers`` people who are not employees.
    """
    if n_employees < 2:
        raise InvalidParameter(
            f"n_employees must be >= 2, got {n_employees}", hint="Ask for a few thousand."
        )
    if not 0 <= web_coverage <= 1:
        raise InvalidParameter(
            f"web_coverage must be in [0, 1], got {web_coverage}",
            hint="It is the fraction of employees with facts on the web.",
        )
    rng = np.random.default_rng(random_state)
    ability = rng.normal(size=n_employees)
    scores = 5.5 + 1.6 * ability[:, None] + rng.normal(scale=1.3, size=(n_employees, 3))
    perf = np.clip(np.rint(scores), 1, 10).astype(int)
    # Seniority: a noisy mix of ability and luck, cut into the six titles.
    seniority = 0.8 * ability + rng.normal(scale=1.0, size=n_employees)
    level = np.digitize(seniority, np.quantile(seniority, [0.30, 0.55, 0.75, 0.88, 0.96]))
    raise_for_performance = 1 + 0.09 * (perf.mean(axis=1) - 5.5)
    salary = (
        BASE_SALARY[level] * raise_for_performance * rng.lognormal(sigma=0.08, size=n_employees)
    )
    holdings = salary / 1000 * rng.lognormal(mean=1.5, sigma=0.45, size=n_employees)

    names = _names("e", n_employees, rng)
    employees = pd.DataFrame(
        {
            "name": names,
            "perf_1": perf[:, 0],
            "perf_2": perf[:, 1],
            "perf_3": perf[:, 2],
            "salary": np.round(salary, -1),
        }
    )
    found = rng.random(n_employees) < web_coverage
    stranger_level = rng.integers(0, len(TITLES), n_strangers)
    web_facts = pd.DataFrame(
        {
            "name": list(np.asarray(names)[found]) + _names("x", n_strangers, rng),
            "title": [TITLES[i] for i in level[found]] + [TITLES[i] for i in stranger_level],
            "holdings": np.round(
                np.concatenate(
                    [
                        holdings[found],
                        BASE_SALARY[stranger_level] / 1000 * rng.lognormal(1.5, 0.45, n_strangers),
                    ]
                ),
                1,
            ),
        }
    )
    return employees, web_facts.sample(frac=1.0, random_state=random_state).reset_index(drop=True)


def make_fusion_case(driven_by, n_employees=120, random_state=0):
    """``(employees, web_facts)`` where one side alone drives the salary (fusion verdict tests).

    ``driven_by="auxiliary"``: the salary is noise the performance scores know nothing of, and the
    web's ``holdings`` are the salary / 1000 within 2%: the auxiliary data alone predicts it, so no
    k protects. ``driven_by="release"``: the salary follows the sum of the performance scores
    (released, microaggregated) and ``holdings`` are noise: a larger k hides it.
    """
    if driven_by not in ("auxiliary", "release"):
        raise InvalidParameter(
            f"driven_by must be 'auxiliary' or 'release', got {driven_by!r}",
            hint="Say which side carries the salary.",
        )
    rng = np.random.default_rng(random_state)
    perf = rng.integers(1, 11, size=(n_employees, 3))
    if driven_by == "auxiliary":
        salary = 50000 + 12000 * rng.normal(size=n_employees)
        holdings = salary / 1000 * rng.lognormal(sigma=0.02, size=n_employees)
    else:
        salary = 30000 + 2500 * perf.sum(axis=1) + 800 * rng.normal(size=n_employees)
        holdings = rng.lognormal(3, 0.5, size=n_employees)
    names = [f"p{i:04d}" for i in range(n_employees)]
    employees = pd.DataFrame({"name": names, "perf_1": perf[:, 0], "perf_2": perf[:, 1],
                              "perf_3": perf[:, 2], "salary": np.round(salary, 2)})
    return employees, pd.DataFrame({"name": names, "holdings": np.round(holdings, 3)})
