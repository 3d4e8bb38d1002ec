#!/usr/bin/env bash
# Make sure the PostgreSQL the tests use is reachable; start a local cluster that
# is installed but stopped. Under CI a missing database fails the run.
set -u
uri="${DEERFLOW_TEST_POSTGRES_URI:-postgresql://postgres@127.0.0.1:5432/postgres}"
py=".venv/bin/python"

reachable() {
  "$py" - "$uri" <<'PY' >/dev/null 2>&1
import sys, psycopg
with psycopg.connect(sys.argv[1], connect_timeout=3) as conn:
    conn.execute("select 1")
PY
}

if reachable; then
  echo "postgres: reachable"
  exit 0
fi
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
  for version in $(ls /etc/postgresql); do
    echo "postgres: starting cluster $version/main"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  done
  for _ in $(seq 1 20); do
    reachable && { echo "postgres: reachable"; exit 0; }
    sleep 0.5
  done
fi
if [ -n "${CI:-}" ]; then
  echo "postgres: not reachable at $uri, and CI is set: failing" >&2
  exit 1
fi
echo "postgres: not reachable at $uri; tests that need it will be skipped" >&2
exit 0
