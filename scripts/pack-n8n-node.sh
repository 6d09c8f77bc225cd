#!/usr/bin/env bash
# Packs the n8n community node (examples/n8n/n8n-nodes-leadgate) as it is published, after
# n8n's own checks for community packages, and prints the tarball's path (stdout's last
# line). Every tool is pinned in the package's package-lock.json and installed here, by
# `npm ci`; nothing else downloads. Any failed step fails the script, loudly:
#
#   1. npm ci         eslint-plugin-n8n-nodes-base, @n8n/eslint-plugin-community-nodes,
#                     @n8n/scan-community-package, typescript, vitest (install scripts off)
#   2. npm run lint   n8n's community-node lint (eslint.config.mjs: the rule sets of
#                     n8n's node starter and scanner), warnings included
#   3. npm run build  tsc into dist/, the icons beside it
#   4. npm pack       the tarball npm publish would upload, into OUTDIR
#   5. npm run scan   n8n's scanner on the tarball and on the sources (scripts/scan.mjs)
#
#   scripts/pack-n8n-node.sh [OUTDIR]     OUTDIR defaults to a new directory under TMPDIR
#
# Used by tests/n8n_package.rs (`make test`), which installs the tarball into a real n8n.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "pack-n8n-node: $*" >&2; exit 1; }
command -v node >/dev/null || fail "Node.js is not installed (the node needs Node.js 20 or newer)"
command -v npm >/dev/null || fail "npm is not installed"
major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$major" -ge 20 ] || fail "Node.js $(node --version) is too old: 20 or newer is needed"

pkg=examples/n8n/n8n-nodes-leadgate
out="${1:-$(mktemp -d "${TMPDIR:-/tmp}/n8n-nodes-leadgate.XXXXXX")}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# One run at a time in the package's directory (npm ci replaces node_modules).
exec 9>"${TMPDIR:-/tmp}/leadgate-pack-n8n-node.lock"
flock 9

cd "$pkg"
echo "== npm ci (the pinned lint, scan and build tools)" >&2
npm ci --prefer-offline --no-audit --no-fund --loglevel=error >&2 || fail "npm ci failed"
echo "== n8n's community-node lint" >&2
npm run --silent lint >&2 || fail "the lint found problems (above)"
echo "== build" >&2
npm run --silent build >&2 || fail "the build failed"
echo "== npm pack into $out" >&2
tarball="$(npm pack --ignore-scripts --pack-destination "$out" --loglevel=error | tail -n1)"
[ -f "$out/$tarball" ] || fail "npm pack did not write $out/$tarball"
echo "== n8n's community-package scanner on $tarball" >&2
npm run --silent scan -- "$out/$tarball" >&2 || fail "n8n's scanner refused the package (above)"
echo "$out/$tarball"
