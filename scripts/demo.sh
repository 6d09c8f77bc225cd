#!/usr/bin/env bash
# `make demo`: builds Leadgate and its developer tools, starts a fake Bitrix24
# (`leadgate-dev fake-crm`, with faults injected per scenario) and `leadgate serve` plus
# a second `leadgate worker` on an embedded SQLite file, plays the eight pilot scenarios
# of docs/SPEC.md and the cross-channel one as real HTTP traffic (`leadgate-dev demo`), prints the results and the
# metrics, and leaves the database for the console. No display and no PostgreSQL needed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Ports: the defaults, or the next free ones when another program holds them (said), or
# DEMO_*_PORT (refused when taken, naming the program and its pid).
. scripts/demo-ports.sh
choose_port GATEWAY_PORT DEMO_GATEWAY_PORT 18080
choose_port CRM_PORT DEMO_CRM_PORT 18091
choose_port DEALS_PORT DEMO_DEALS_PORT 18081
choose_port CONSOLE_PORT DEMO_CONSOLE_PORT 18090
DIR="$PWD/demo-data"
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
BIN="$TARGET/debug/leadgate"
DEV="$TARGET/debug/leadgate-dev"

if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust (https://rustup.rs) first" >&2
  exit 1
fi
if ! command -v cc >/dev/null; then
  echo "== installing a C compiler (build-essential) ..."
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq build-essential pkg-config >/dev/null
fi

# The web console's UI, embedded by the build below (a build without it says so on the page).
if command -v npm >/dev/null; then
  echo "== building the console's UI (ui/dist) ..."
  [ -d ui/node_modules ] || npm --prefix ui ci --no-audit --no-fund >/dev/null
  npm --prefix ui run build >/dev/null
else
  echo "== npm not found: the web console will say its UI is not built (apt-get install nodejs npm)"
fi

echo "== building leadgate and leadgate-dev (the first build takes a few minutes; cargo shows its progress) ..."
cargo build --locked -p leadgate --bin leadgate -p leadgate-testkit --bin leadgate-dev

# Fresh random credentials for this run (the file is the demo's own, readable by its owner only).
rand_hex() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
SITE_SECRET="$(rand_hex)"; TILDA_TOKEN="$(rand_hex)"; READ_TOKEN="$(rand_hex)"
ZADARMA_SECRET="$(rand_hex)"; TELEGRAM_SECRET="$(rand_hex)"

mkdir -p "$DIR"
rm -f "$DIR"/leadgate.db "$DIR"/leadgate.db-wal "$DIR"/leadgate.db-shm "$DIR"/*.log
(umask 077; : > "$DIR/leadgate.toml")
cat > "$DIR/leadgate.toml" <<TOML
[database]
url = "sqlite://$DIR/leadgate.db?mode=rwc"

[server]
listen = "127.0.0.1:$GATEWAY_PORT"

[worker]
poll_interval = "50ms"
lease = "3s"

[retry]
max_attempts = 3
base_delay = "100ms"
max_delay = "1s"

[[source]]
name = "site"
key = "json:/submission_id"
ignore = ["/sent_at"]
event_time = "json:/created_at"
secret = "$SITE_SECRET"            # deliveries are signed (HMAC-SHA256 over timestamp and body)

[[source]]
name = "tilda"
key = "form:tranid"
token = "$TILDA_TOKEN"             # Tilda cannot sign: a secret token in the intake URL

[[source]]
name = "calls"
preset = "zadarma"                 # Zadarma's NOTIFY_START / NOTIFY_END, signed with the API secret
secret = "$ZADARMA_SECRET"
on_contact_match = "link"          # a call from someone we know joins their CRM record

[[source]]
name = "tg"
preset = "telegram-webhook"        # the bot's webhook updates, X-Telegram-Bot-Api-Secret-Token
token = "$TELEGRAM_SECRET"
on_contact_match = "review"        # a message from someone we know: a manager decides

[api]
read_token = "$READ_TOKEN"         # GET /v1/operations/..., /metrics

[crm]
kind = "bitrix24"
webhook_url = "http://127.0.0.1:$CRM_PORT/rest/1/fake-secret/"
timeout = "1s"
# The fake finishes a create before it answers; a real portal may still land one up to
# 60 s after the client gave up, hence Bitrix24's default of 75 s.
settle = "2s"
TOML

# A second gateway on the same fake portal makes contacts and deals (scenario 10), on its
# own database so the two workers never take each other's leads.
sed -e "s#$DIR/leadgate.db#$DIR/leadgate-deals.db#" -e "s#127.0.0.1:$GATEWAY_PORT#127.0.0.1:$DEALS_PORT#" \
  "$DIR/leadgate.toml" > "$DIR/deals.toml"
printf 'entity = "contact_deal"\n' >> "$DIR/deals.toml"
# The web console of the first gateway: the operator `demo`, a fresh password each run.
CONSOLE_PASSWORD="$(rand_hex)"
(umask 077; printf '%s\n' "$CONSOLE_PASSWORD" > "$DIR/console-password")
{ printf '\n'; printf '%s\n' "$CONSOLE_PASSWORD" | "$BIN" console password --operator demo
  printf 'listen = "127.0.0.1:%s"\n' "$CONSOLE_PORT"; } >> "$DIR/leadgate.toml"
chmod 600 "$DIR/deals.toml"
rm -f "$DIR"/leadgate-deals.db "$DIR"/leadgate-deals.db-wal "$DIR"/leadgate-deals.db-shm

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Waits until process $2 (started by this script) listens on port $1: never plays against
# whoever else took the port meanwhile.
wait_http() {
  for _ in $(seq 1 200); do
    if ! kill -0 "$2" 2>/dev/null; then
      echo "the process for port $1 stopped; its log ($3):" >&2
      tail -n 20 "$3" >&2 || true
      exit 1
    fi
    if port_owner_is "$1" "$2"; then return 0; fi
    sleep 0.1
  done
  if port_taken "$1"; then
    echo "port $1 is held by $(port_holder "$1"), not by the process this demo started" >&2
  else
    echo "nothing answers on port $1; see $3" >&2
  fi
  exit 1
}

echo "== starting the fake Bitrix24 on 127.0.0.1:$CRM_PORT"
"$DEV" fake-crm --kind bitrix24 --listen "127.0.0.1:$CRM_PORT" >"$DIR/fake-crm.log" 2>&1 &
pids+=($!)
wait_http "$CRM_PORT" $! "$DIR/fake-crm.log"
echo "== starting leadgate serve on 127.0.0.1:$GATEWAY_PORT (its console on http://127.0.0.1:$CONSOLE_PORT/) and a second leadgate worker (SQLite: $DIR/leadgate.db)"
"$BIN" serve --config "$DIR/leadgate.toml" >"$DIR/serve.log" 2>&1 &
pids+=($!)
wait_http "$GATEWAY_PORT" $! "$DIR/serve.log"
"$BIN" worker --config "$DIR/leadgate.toml" >"$DIR/worker.log" 2>&1 &
pids+=($!)
echo "== starting a contact + deal gateway on 127.0.0.1:$DEALS_PORT (SQLite: $DIR/leadgate-deals.db)"
"$BIN" serve --config "$DIR/deals.toml" >"$DIR/deals.log" 2>&1 &
pids+=($!)
wait_http "$DEALS_PORT" $! "$DIR/deals.log"

echo "== playing the eight pilot scenarios of docs/SPEC.md, the cross-channel one and contact + deal"
status=0
"$DEV" demo --gateway "http://127.0.0.1:$GATEWAY_PORT" --crm "http://127.0.0.1:$CRM_PORT" \
  --deals-gateway "http://127.0.0.1:$DEALS_PORT" --config "$DIR/leadgate.toml" || status=$?

echo
echo "== metrics (leadgate metrics --config $DIR/leadgate.toml)"
"$BIN" metrics --config "$DIR/leadgate.toml"

cat <<TXT

The database is kept: $DIR/leadgate.db
  look at one operation:  $BIN ops show site:<key> --config $DIR/leadgate.toml
  open the console on it: make console-run LEADGATE_DATABASE_URL=sqlite://$DIR/leadgate.db
  or in a browser:        $BIN serve --config $DIR/leadgate.toml
                          then http://127.0.0.1:$CONSOLE_PORT/, login demo, password in $DIR/console-password
TXT
# With a display, the console opens on the demo database (it builds first: minutes when
# cold); LEADGATE_DEMO_NO_CONSOLE=1 skips it.
if [ "$status" -eq 0 ] && [ -z "${LEADGATE_DEMO_NO_CONSOLE:-}" ] \
  && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; }; then
  echo
  echo "== a display is available: building and opening the console (close its window to finish)"
  make --no-print-directory console-run LEADGATE_DATABASE_URL="sqlite://$DIR/leadgate.db" || \
    echo "the console did not open; the demo itself passed"
fi
exit $status
