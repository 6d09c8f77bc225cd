#!/usr/bin/env bash
# `make test-loaded`: the Rust tests of `make unit` with the machine kept busy by
# `stress-ng --cpu $LOAD_CPUS` (default 2) beside them, as on a developer's machine that
# is doing something else. A test whose pass depends on the machine's speed fails here.
# The load is stopped when the run ends, however it ends (failure, Ctrl-C, kill); its own
# --timeout ends it anyway if this script is killed with SIGKILL.
# Arguments are passed to `cargo test` (default: `--workspace`), e.g.
#   scripts/test-loaded.sh -p leadgate --test it outage
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-install-missing.sh "the loaded test run" stress-ng
scripts/install-test-deps.sh
scripts/ensure-postgres.sh
cpus="${LOAD_CPUS:-2}"
stress-ng --cpu "$cpus" --timeout "${LOAD_TIMEOUT:-3h}" --quiet &
load=$!
stop_load() {
  kill -TERM "$load" 2>/dev/null || true
  wait "$load" 2>/dev/null || true
}
trap stop_load EXIT
trap 'exit 130' INT TERM HUP
echo "== stress-ng --cpu $cpus running (pid $load)"
if (($#)); then
  cargo test --locked "$@"
else
  scripts/install-console-deps.sh
  scripts/install-n8n.sh >/dev/null
  cargo test --workspace --locked
fi
