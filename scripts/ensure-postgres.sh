#!/usr/bin/env bash
# Makes sure the PostgreSQL named by LEADGATE_TEST_DATABASE_URL answers, for the
# PostgreSQL half of the test suite. On this machine kind it is already running; on a
# fresh Debian machine it starts the installed cluster or installs Debian's `postgresql`
# and opens it to local trust connections. It exits non-zero when the server still does
# not answer: the suite must fail then, never skip.
set -euo pipefail

url="${LEADGATE_TEST_DATABASE_URL:?LEADGATE_TEST_DATABASE_URL is not set}"
hostport="${url#*://}"; hostport="${hostport#*@}"; hostport="${hostport%%/*}"
host="${hostport%%:*}"; port="${hostport##*:}"; [ "$port" = "$host" ] && port=5432

answers() { timeout 5 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; }

if answers; then exit 0; fi
case "$host" in 127.0.0.1|localhost|::1) ;; *)
  echo "PostgreSQL at $host:$port does not answer, and it is not local: start it yourself." >&2
  exit 1 ;;
esac

sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
  echo "== installing PostgreSQL (Debian package) ..."
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
  version=$(ls /etc/postgresql | sort -V | tail -n1)
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  # Test-only cluster on loopback: trust local connections, as the suite expects.
  $sudo sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/; s/^(local\s+all\s+postgres\s+)\S+/\1trust/' "$hba"
fi
version=$(ls /etc/postgresql | sort -V | tail -n1)
echo "== starting PostgreSQL $version ..."
$sudo pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
for _ in $(seq 1 30); do answers && break; sleep 1; done
if ! answers; then
  echo "PostgreSQL at $host:$port still does not answer" >&2
  exit 1
fi
db="${url##*/}"; db="${db%%\?*}"
if [ -n "$db" ] && command -v psql >/dev/null; then
  psql -h "$host" -p "$port" -U postgres -d postgres -tAc "select 1 from pg_database where datname = '$db'" | grep -q 1 \
    || psql -h "$host" -p "$port" -U postgres -d postgres -c "create database \"$db\"" >/dev/null
fi
