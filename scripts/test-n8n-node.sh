#!/usr/bin/env bash
# `make test-n8n-node`: builds the n8n community node (examples/n8n/n8n-nodes-leadgate:
# `npm ci`, n8n's community-node lint, `tsc`) and runs its tests (vitest) against a live gateway
# (scripts/live-gateway.sh: `leadgate serve` on SQLite with a fake Bitrix24, and a tenant
# `acme` with a fake Bitrix24 of its own).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "test-n8n-node: $*" >&2; exit 1; }
command -v node >/dev/null || fail "Node.js is not installed (the node needs Node.js 20 or newer)"
command -v npm >/dev/null || fail "npm is not installed"
major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$major" -ge 20 ] || fail "Node.js $(node --version) is too old: 20 or newer is needed"

pkg=examples/n8n/n8n-nodes-leadgate
( cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent lint && npm run --silent build )
LEADGATE_LIVE_TENANT=acme scripts/live-gateway.sh bash -c "cd '$pkg' && npx vitest run"
