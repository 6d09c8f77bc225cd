#!/usr/bin/env bash
# Runs COMMAND against a live gateway: a real `leadgate serve` (debug build) on a fresh
# SQLite file, with the fake Bitrix24 (`leadgate-dev fake-crm`) as its CRM, both on free
# loopback ports; both are stopped when COMMAND ends, and its exit code is this script's.
#
#   scripts/live-gateway.sh COMMAND [ARGS...]
#
# COMMAND gets in its environment:
#   LEADGATE_URL                 http://127.0.0.1:<port>
#   LEADGATE_INTEGRATION_TOKEN   the [api] integration_token (claim API and reads)
#   LEADGATE_SOURCE_TOKEN        the token of the source `web` (X-Leadgate-Token)
#   LEADGATE_CLAIM_SOURCE        the [claim_api] source (`n8n`): keys are n8n:<key>
#   LEADGATE_CONFIG, LEADGATE_DIR   the configuration file and the run's directory
# With LEADGATE_LIVE_TENANT=<slug> the gateway also serves that tenant (fleet mode: applied
# with `leadgate tenant apply`, its own fake Bitrix24, its claim API's source `n8n`), and
# COMMAND gets LEADGATE_TENANT (the slug) and LEADGATE_TENANT_TOKEN (its integration token).
# Used by `make test-api` (Schemathesis) and `make test-n8n-node` (the community node's tests).
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
BIN="$TARGET/debug/leadgate"
DEV="$TARGET/debug/leadgate-dev"
cargo build --locked --quiet -p leadgate --bin leadgate -p leadgate-testkit --bin leadgate-dev

DIR="$(mktemp -d "${TMPDIR:-/tmp}/leadgate-live.XXXXXX")"
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
rand_hex() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
GATEWAY_PORT="$(free_port)"
CRM_PORT="$(free_port)"
TOKEN="$(rand_hex)"
SOURCE_TOKEN="$(rand_hex)"
TENANT="${LEADGATE_LIVE_TENANT:-}"
TENANT_CRM_PORT="$(free_port)"
TENANT_TOKEN="$(rand_hex)"

(umask 077; cat > "$DIR/leadgate.toml" <<TOML
[database]
url = "sqlite://$DIR/leadgate.db?mode=rwc"

[server]
listen = "127.0.0.1:$GATEWAY_PORT"

[worker]
poll_interval = "100ms"

[[source]]
name = "web"
key = "json:/submission_id"
token = "$SOURCE_TOKEN"

[claim_api]
source = "n8n"
lease = "30s"

[api]
integration_token = "$TOKEN"

[crm]
kind = "bitrix24"
webhook_url = "http://127.0.0.1:$CRM_PORT/rest/1/fake-secret/"
timeout = "2s"
settle = "2s"
TOML
)
if [ -n "$TENANT" ]; then
  (umask 077
   printf '%s%s\n' "$(rand_hex)" "$(rand_hex)" > "$DIR/token.key"
   printf '\n[fleet]\ntoken_key_file = "%s"\n' "$DIR/token.key" >> "$DIR/leadgate.toml"
   cat > "$DIR/tenants.toml" <<TOML
[[tenant]]
slug = "$TENANT"
name = "$TENANT (live gateway)"
[tenant.crm]
kind = "bitrix24"
webhook_url = "http://127.0.0.1:$TENANT_CRM_PORT/rest/1/fake-secret/"
timeout = "2s"
settle = "2s"
[tenant.claim_api]
source = "n8n"
lease = "30s"
[tenant.api]
integration_token = "$TENANT_TOKEN"
TOML
  )
fi

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${status:-1}" -eq 0 ] && [ -z "${LEADGATE_KEEP_LIVE_DIR:-}" ]; then rm -rf "$DIR"; fi
}
trap cleanup EXIT

wait_http() {
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "live-gateway: nothing answers on port $1; see $DIR/*.log" >&2
  tail -n 20 "$DIR"/*.log >&2 || true
  exit 1
}

"$DEV" fake-crm --kind bitrix24 --listen "127.0.0.1:$CRM_PORT" >"$DIR/fake-crm.log" 2>&1 &
pids+=($!)
wait_http "$CRM_PORT"
if [ -n "$TENANT" ]; then
  "$DEV" fake-crm --kind bitrix24 --listen "127.0.0.1:$TENANT_CRM_PORT" >"$DIR/fake-crm-$TENANT.log" 2>&1 &
  pids+=($!)
  wait_http "$TENANT_CRM_PORT"
  "$BIN" tenant apply "$DIR/tenants.toml" --config "$DIR/leadgate.toml" >"$DIR/tenant-apply.log" 2>&1 \
    || { echo "live-gateway: applying the tenant failed:" >&2; cat "$DIR/tenant-apply.log" >&2; exit 1; }
fi
"$BIN" serve --config "$DIR/leadgate.toml" >"$DIR/serve.log" 2>&1 &
serve_pid=$!
pids+=($serve_pid)
wait_http "$GATEWAY_PORT"
if [ -n "$TENANT" ]; then
  # Served once the gateway has read the registry: its figures answer the tenant's token.
  python3 - "http://127.0.0.1:$GATEWAY_PORT/v1/tenants/$TENANT/metrics" "$TENANT_TOKEN" <<'PY' \
    || { echo "live-gateway: the tenant is not served; see $DIR/serve.log" >&2; exit 1; }
import sys, time, urllib.request, urllib.error
url, token = sys.argv[1], sys.argv[2]
for _ in range(200):
    try:
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
        if urllib.request.urlopen(req, timeout=2).status == 200:
            sys.exit(0)
    except (urllib.error.URLError, OSError):
        pass
    time.sleep(0.1)
sys.exit(1)
PY
fi
echo "== live gateway on http://127.0.0.1:$GATEWAY_PORT (SQLite, fake Bitrix24 on $CRM_PORT; logs in $DIR)" >&2

status=0
LEADGATE_URL="http://127.0.0.1:$GATEWAY_PORT" \
LEADGATE_INTEGRATION_TOKEN="$TOKEN" \
LEADGATE_SOURCE_TOKEN="$SOURCE_TOKEN" \
LEADGATE_CLAIM_SOURCE="n8n" \
LEADGATE_CONFIG="$DIR/leadgate.toml" \
LEADGATE_DIR="$DIR" \
LEADGATE_TENANT="$TENANT" \
LEADGATE_TENANT_TOKEN="$([ -n "$TENANT" ] && echo "$TENANT_TOKEN")" \
  "$@" || status=$?

# The gateway must still be alive: a crash during the run fails it whatever COMMAND said.
if ! kill -0 "$serve_pid" 2>/dev/null; then
  echo "live-gateway: leadgate serve died during the run; its log:" >&2
  tail -n 40 "$DIR/serve.log" >&2
  status=1
fi
if grep -q "panicked" "$DIR/serve.log"; then
  echo "live-gateway: leadgate serve panicked during the run:" >&2
  grep -A5 "panicked" "$DIR/serve.log" | head -40 >&2
  status=1
fi
[ "$status" -eq 0 ] || echo "live-gateway: failed (exit $status); logs kept in $DIR" >&2
exit "$status"
