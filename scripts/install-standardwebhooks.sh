#!/usr/bin/env bash
# Installs PyPI's `standardwebhooks` (the Standard Webhooks reference library for Python,
# a pinned version) into a virtualenv outside the clone and prints the path of its
# `python`. tests/it/feed.rs runs tests/fixtures/feed_receiver.py with it: a real receiver
# that verifies each message's signature with an implementation that is not Leadgate's.
# Idempotent: a complete install (marked by .installed) is reused in a second. It exits
# non-zero, loudly, when it cannot install: the feed's test must fail then, never skip.
# `make test` calls it (through scripts/install-test-deps.sh).
#
#   STANDARDWEBHOOKS_VERSION   default 1.1.0
#   STANDARDWEBHOOKS_HOME      default /var/tmp/leadgate-standardwebhooks-$STANDARDWEBHOOKS_VERSION
set -euo pipefail
cd "$(dirname "$0")/.."

version="${STANDARDWEBHOOKS_VERSION:-1.1.0}"
home="${STANDARDWEBHOOKS_HOME:-/var/tmp/leadgate-standardwebhooks-$version}"
python="$home/bin/python"

fail() { echo "install-standardwebhooks: $*" >&2; exit 1; }
installed() {
  [ -f "$home/.installed" ] && [ -x "$python" ] && [ "$(cat "$home/.installed")" = "$version" ]
}

if installed; then
  echo "$python"
  exit 0
fi

command -v python3 >/dev/null || scripts/apt-install-missing.sh "standardwebhooks" python3 >&2
# Debian's python3 has no venv module without python3-venv.
python3 -c 'import ensurepip, venv' 2>/dev/null || scripts/apt-install-missing.sh "standardwebhooks" python3-venv >&2

mkdir -p "$(dirname "$home")"
exec 9>"$home.lock"
flock 9
if installed; then
  echo "$python"
  exit 0
fi

echo "== installing standardwebhooks $version into $home ..." >&2
rm -rf "$home"
python3 -m venv "$home" || fail "python3 -m venv $home failed"
"$home/bin/pip" install --quiet --disable-pip-version-check "standardwebhooks==$version" >&2 \
  || fail "pip install standardwebhooks==$version failed (see above); nothing was cached"
"$python" -c 'from standardwebhooks.webhooks import Webhook' \
  || fail "standardwebhooks $version installed but does not import"
echo "$version" >"$home/.installed"
echo "$python"
