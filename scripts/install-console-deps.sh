#!/usr/bin/env bash
# What building and testing the console needs on a Debian machine, installed only when
# missing: WebKitGTK and friends for Tauri, Xvfb and WebKitWebDriver for the real-window
# test (and a session bus with Python's D-Bus bindings for its fake notification server),
# tauri-driver from crates.io, and the npm packages of ui/ and of the E2E runner.
# `make test`, `make e2e` and `make console` call it; it is quick when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/apt-install-missing.sh "the console" build-essential pkg-config curl wget file libssl-dev \
  libwebkit2gtk-4.1-dev libxdo-dev libayatana-appindicator3-dev librsvg2-dev xvfb xauth webkit2gtk-driver \
  dbus-daemon python3-dbus python3-gi desktop-file-utils

command -v node >/dev/null || { echo "Node.js 20+ is required (apt-get install nodejs npm)" >&2; exit 1; }

export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v tauri-driver >/dev/null; then
  echo "== installing tauri-driver (crates.io) ..."
  cargo install tauri-driver --locked --quiet
fi
