# plpy_anon -- PGXS extension plus the project's own targets.
#
#   make demo      set up a fresh Debian 12 machine (as root), start a throwaway cluster, run the demo
#   make test      set up, then run the whole test suite against a real PostgreSQL 15: the default
#                  run (make test-fast), then the slow one (make test-slow)
#   make bench     print the benchmark figures (reads ../shared/data, or PLPY_ANON_DATA)
#   make build     write extension/ and docs/sql-reference.md from sql/ (built, not in git)
#   make install   install the Python package into $(VENV) and the extension files via PGXS
#   make freeze    record the current version as released (before bumping it; see sql/build.py)

VENV       ?= /opt/plpy_anon/venv
export VENV              # docker/setup-debian.sh reads it
PG_CONFIG  ?= /usr/lib/postgresql/15/bin/pg_config
PG_OS_USER ?= postgres   # the OS user the database's backends run as (owns the JIT cache)
# (not PYTHON: PGXS defines that as the interpreter PL/Python was built with)
VPYTHON     = $(VENV)/bin/python
VERSION    := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' plpy_anon/__init__.py)

# PGXS: install the control file and every versioned script into the server's extension dir.
EXTENSION  =
MODULEDIR  = extension
# (listed by the shell when the install recipe runs, after `build` wrote them: make's $(wildcard)
# may answer from a directory listing read before they existed, as on a fresh clone)
DATA       = extension/plpy_anon.control $(shell ls extension/plpy_anon--*.sql 2>/dev/null)

ifneq ($(wildcard $(PG_CONFIG)),)
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
endif

.PHONY: setup build freeze install-py demo test test-fast test-slow test-unit test-db bench experiments lint clean-venv

setup:
	bash docker/setup-debian.sh --dev

build:
	/usr/bin/python3 sql/build.py --venv $(VENV)

# Releasing: freeze this version's incremental files (versions.txt, frozen.txt), commit, then bump
# __version__; the next build writes the upgrade script from this version.
freeze:
	/usr/bin/python3 sql/build.py --freeze

# PGXS's install copies $(DATA) into the server's extension directory; before it, rebuild the
# scripts and install this checkout's package into the backend's environment.
install: build install-py

install-py:
	@test -x $(VPYTHON) || { echo "make: no environment at $(VENV): run 'make setup' first" >&2; exit 1; }
	@test -f $(PG_CONFIG) || { echo "make: $(PG_CONFIG) missing: run 'make setup' first" >&2; exit 1; }
	@# setuptools builds the wheel in ./build: files left there by an older tree would be installed too
	rm -rf build
	$(VENV)/bin/pip install -q --no-deps --no-build-isolation --force-reinstall . && chmod -R a+rX $(VENV)
	@# the Mondrian fit's compiled kernels: their machine-code cache (plpy_anon/_jit_cache in the
	@# venv) belongs to the database's OS user, who compiles them there once now, so that no
	@# backend's fit compiles, and writes the fit's object file, which backends load without
	@# numba (python -I: the installed package, not this checkout)
	@cache=$$(cd / && $(VPYTHON) -I -c 'from plpy_anon.core.mondrian_jit import CACHE_DIR; print(CACHE_DIR)') && \
	if [ "$$(id -u)" = 0 ] && id -u $(PG_OS_USER) >/dev/null 2>&1; then \
		install -d -o $(PG_OS_USER) -m 0755 "$$cache" && \
		cd / && runuser -u $(PG_OS_USER) -- $(VPYTHON) -I -m plpy_anon.core.mondrian_warm; \
	else \
		mkdir -p "$$cache" && cd / && $(VPYTHON) -I -m plpy_anon.core.mondrian_warm; \
	fi

# setup may have just installed PostgreSQL, so install runs in a new make that includes PGXS.
demo: setup
	$(MAKE) install
	$(VPYTHON) -m plpy_anon.demo

# The whole suite in two runs (tests/runs.py): the default one, every test not marked slow, with its
# slowest tests listed; then the slow one, the tests marked slow and the property tests marked
# more_examples at their full count (PLPY_ANON_TESTS=slow).
test: setup
	$(MAKE) install
	$(MAKE) test-fast
	$(MAKE) test-slow

test-fast:
	$(VPYTHON) -m pytest tests -q --durations=15

test-slow:
	PLPY_ANON_TESTS=slow $(VPYTHON) -m pytest tests -q -m "slow or more_examples" --durations=15

test-unit:
	$(VPYTHON) -m pytest tests/unit -q

test-db: install
	$(VPYTHON) -m pytest tests/db -q

bench: setup
	$(MAKE) install
	$(VPYTHON) -m tests.bench

lint:
	$(VENV)/bin/ruff check plpy_anon tests sql/build.py
