"""The report's thresholds and their help, apart from the report (jinja2, numpy, psycopg), so
that the command line's options read them without loading it."""

#: thresholds the figures are judged against when the release asked for none (``--threshold``
#: overrides them): k and l as commonly published (k >= 5: no record above 0.2 prosecutor risk),
#: t as Li et al. ("t-Closeness", 2007) illustrate it, a rule as docs/break-merge.md's alpha
DEFAULT_THRESHOLDS = {"k": 5, "l": 2, "entropy_l": 2, "t": 0.2, "rule": 0.9,
                      "prosecutor": 0.2, "journalist": 0.2, "marketer": 0.05}
THRESHOLD_HELP = {
    "k": "smallest class at least",
    "l": "distinct l at least",
    "entropy_l": "entropy l at least",
    "t": "t-closeness at most",
    "rule": "strongest rule's probability below",
    "prosecutor": "highest prosecutor risk at most",
    "journalist": "highest journalist risk at most",
    "marketer": "marketer risk at most",
}
