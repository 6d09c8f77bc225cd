#!/usr/bin/env bash
# Installs Schemathesis (from PyPI, a pinned version) into a virtualenv outside the clone
# and prints the path of its `schemathesis` command. Idempotent: a complete install (marked
# by .installed) is reused in a second. It exits non-zero, loudly, when it cannot install:
# the contract run must fail then, never skip. `make test` calls it (through test-api).
#
#   SCHEMATHESIS_VERSION   default 4.32.5
#   SCHEMATHESIS_HOME      default /var/tmp/leadgate-schemathesis-$SCHEMATHESIS_VERSION
set -euo pipefail
cd "$(dirname "$0")/.."

version="${SCHEMATHESIS_VERSION:-4.32.5}"
home="${SCHEMATHESIS_HOME:-/var/tmp/leadgate-schemathesis-$version}"
bin="$home/bin/schemathesis"

fail() { echo "install-schemathesis: $*" >&2; exit 1; }

if [ -f "$home/.installed" ] && [ -x "$bin" ] && [ "$(cat "$home/.installed")" = "$version" ]; then
  echo "$bin"
  exit 0
fi

command -v python3 >/dev/null || scripts/apt-install-missing.sh "Schemathesis" python3 >&2
# Debian's python3 has no venv module without python3-venv.
python3 -c 'import ensurepip, venv' 2>/dev/null || scripts/apt-install-missing.sh "Schemathesis" python3-venv >&2

mkdir -p "$(dirname "$home")"
exec 9>"$home.lock"
flock 9
if [ -f "$home/.installed" ] && [ -x "$bin" ] && [ "$(cat "$home/.installed")" = "$version" ]; then
  echo "$bin"
  exit 0
fi

echo "== installing schemathesis $version into $home ..." >&2
rm -rf "$home"
python3 -m venv "$home" || fail "python3 -m venv $home failed"
"$home/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version" >&2 \
  || fail "pip install schemathesis==$version failed (see above); nothing was cached"
installed="$("$bin" --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -1)"
[ "$installed" = "$version" ] || fail "installed schemathesis says version '$installed', not $version"
echo "$version" >"$home/.installed"
echo "$bin"
