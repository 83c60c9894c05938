#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what the tests need, runs the static checks
# (ruff, mypy, import-linter's layer contracts), starts a throw-away PostgreSQL server on loopback
# in a temporary directory, runs pytest, and stops the server. It fails if any of them fails.
# Extra arguments go to pytest (e.g. `bash tools/test.sh -m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
echo "== installing tunecache and its test dependencies"
$PY -m pip install -q --disable-pip-version-check -e '.[all,test,lint,bench]' 2>&1 | grep -v -E "^WARNING: Running pip as|^\[notice\]|^WARNING: Location" || true

echo "== static checks: ruff, mypy, import-linter"
checks=0
$PY -m ruff check tunecache tools tests || checks=1
$PY -m mypy || checks=1
(PATH="$(dirname "$($PY -c 'import sys; print(sys.executable)')"):$PATH" lint-imports) || checks=1

PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
  echo "== installing PostgreSQL (Debian package)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi

PGDIR=$(mktemp -d /tmp/tunecache-pg.XXXXXX)
PGPORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir "$PGDIR" postgres
  chown postgres "$PGDIR"
  AS_PG="runuser -u postgres --"
else
  AS_PG=""
fi
stop_pg() {
  $AS_PG "$PGBIN/pg_ctl" -D "$PGDIR/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$PGDIR"
}
trap stop_pg EXIT
echo "== starting PostgreSQL on 127.0.0.1:$PGPORT in $PGDIR"
$AS_PG "$PGBIN/initdb" -D "$PGDIR/data" -U postgres -A trust --no-sync >/dev/null
$AS_PG "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $PGDIR -c fsync=off -c max_connections=200" start >/dev/null
export TUNECACHE_TEST_PG_URL="postgresql://postgres@127.0.0.1:$PGPORT/postgres"

echo "== running the tests"
set +e
$PY -m pytest --durations=40 "$@"  # the slowest tests, so a CI log shows where its minutes go
rc=$?
set -e
if [ "$checks" != 0 ]; then
  echo "== static checks failed (see above)"
  [ "$rc" = 0 ] && rc=1
fi
exit $rc
