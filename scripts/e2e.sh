#!/usr/bin/env bash
# Runs the console's WebDriver end-to-end test under a virtual display. Expects the UI to
# be built (make e2e does it) and tauri-driver + WebKitWebDriver to be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export DBUS_SESSION_BUS_ADDRESS=disabled: NO_AT_BRIDGE=1
start=$(date +%s)
# One session at a time: tauri-driver's ports are fixed.
xvfb-run -a -s '-screen 0 1280x800x24' \
  cargo test --locked --workspace --features leadgate-console/e2e --test e2e -- --nocapture --test-threads=1
echo "e2e: $(( $(date +%s) - start )) s"
