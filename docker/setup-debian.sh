#!/usr/bin/env bash
# Sets up a Debian 12 machine for plpy_anon, idempotently:
#   1. Debian packages: PostgreSQL 15, PL/Python (plpython3u), PGXS headers, pg_cron, python3-venv
#      (and, with --dev, Chromium: a test renders the release report in it).
#   2. A virtual environment built from Debian's /usr/bin/python3 -- the interpreter PL/Python
#      embeds -- in a directory the `postgres` OS user can read (never under /root, which is 0700).
#   3. The package and its dependencies in that environment (`pip install`), dev extras on request.
# The Dockerfile runs this same script, so the image and the tested install cannot drift apart.
#
# Usage: docker/setup-debian.sh [--dev]      (VENV=/opt/plpy_anon/venv by default)
set -euo pipefail

VENV="${VENV:-/opt/plpy_anon/venv}"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
EXTRAS="[server,client]"
[ "${1:-}" = "--dev" ] && EXTRAS="[server,client,dev]"

PKGS="postgresql-15 postgresql-plpython3-15 postgresql-server-dev-15 postgresql-15-cron python3-venv make"
# the tests open the release report in a real browser (tests/cli/test_report.py)
[ "${1:-}" = "--dev" ] && PKGS="$PKGS chromium"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "$(id -u)" = 0 ] || { echo "setup: need root to install:$missing" >&2; exit 1; }
  echo "setup: installing Debian packages:$missing"
  apt-get update -qq
  # Debian's postgresql-common creates a default cluster on install; we never use it (our clusters
  # are throwaway ones), so ask it not to.
  mkdir -p /etc/postgresql-common
  if [ ! -f /etc/postgresql-common/createcluster.conf ] || ! grep -q '^create_main_cluster' /etc/postgresql-common/createcluster.conf; then
    echo "create_main_cluster = false" >> /etc/postgresql-common/createcluster.conf
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtual environment $VENV from /usr/bin/python3"
  mkdir -p "$(dirname "$VENV")"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip "setuptools>=77"
fi
chmod -R a+rX "$(dirname "$VENV")"

# Dependencies first (cached by pip when already satisfied), then our package itself, always
# reinstalled so the backend runs exactly the code of this checkout.
"$VENV/bin/pip" install -q -c "$SRC/docker/constraints.txt" "setuptools>=77" "$SRC$EXTRAS"
"$VENV/bin/pip" install -q --no-deps --force-reinstall "$SRC"
chmod -R a+rX "$VENV"
# the CLI on PATH (its console script lives in the venv)
ln -sf "$VENV/bin/plpy-anon" /usr/local/bin/plpy-anon
echo "setup: $("$VENV/bin/python" -c 'import plpy_anon, sys; print("plpy_anon", plpy_anon.__version__, "python", sys.version.split()[0])') in $VENV"
