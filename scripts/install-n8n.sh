#!/usr/bin/env bash
# Installs the n8n that tests/n8n.rs runs, once, outside the clone, and prints the path of
# its `n8n` command. Idempotent: a complete install (marked by .installed) is reused in a
# second. It exits non-zero, loudly, when it cannot install: the real-n8n tests must fail
# then, never skip.
#
#   N8N_VERSION   default 1.97.1 (2.x needs a newer Node.js than 20; see examples/n8n/README.md)
#   N8N_HOME      default /var/tmp/leadgate-n8n-$N8N_VERSION
#
# n8n's `xlsx` dependency names a tarball on SheetJS's own CDN rather than the npm
# registry; the override pins it to 0.18.5, which is on the registry. Install scripts are
# skipped (--ignore-scripts): n8n runs without them, and some would download binaries.
set -euo pipefail

version="${N8N_VERSION:-1.97.1}"
home="${N8N_HOME:-/var/tmp/leadgate-n8n-$version}"
bin="$home/node_modules/.bin/n8n"

fail() { echo "install-n8n: $*" >&2; exit 1; }

command -v node >/dev/null || fail "Node.js is not installed (n8n $version needs Node.js 20)"
command -v npm >/dev/null || fail "npm is not installed"
major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$major" -ge 20 ] || fail "Node.js $(node --version) is too old: n8n $version needs 20 or newer"

if [ -f "$home/.installed" ] && [ -x "$bin" ] \
   && [ "$(cat "$home/.installed")" = "$version" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$home"
# One installer at a time per cache directory (two test runs started together).
exec 9>"$home/.lock"
flock 9
if [ -f "$home/.installed" ] && [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

echo "== installing n8n $version into $home (about 2 minutes, 1.4-1.8 GB) ..." >&2
start=$(date +%s)
cat >"$home/package.json" <<EOF
{ "private": true, "dependencies": { "n8n": "$version" }, "overrides": { "xlsx": "0.18.5" } }
EOF
( cd "$home" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error >&2 ) \
  || fail "npm install of n8n $version failed (see above); nothing was cached"
[ -x "$bin" ] || fail "npm install finished but $bin is missing"
"$bin" --version >/dev/null 2>&1 || fail "$bin --version does not run"
installed="$("$bin" --version 2>/dev/null | tail -n1)"
[ "$installed" = "$version" ] || fail "installed n8n says version '$installed', not $version"
echo "$version" >"$home/.installed"
echo "== n8n $version installed in $(( $(date +%s) - start )) s" >&2
echo "$bin"
