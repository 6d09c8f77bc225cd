#!/usr/bin/env bash
# What CI needs for the console on a Debian machine, installed only when missing, then
# the real-window end-to-end test (`make e2e`).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential pkg-config curl wget file libssl-dev libwebkit2gtk-4.1-dev libxdo-dev
  libayatana-appindicator3-dev librsvg2-dev xvfb xauth webkit2gtk-driver)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

command -v node >/dev/null || { echo "Node.js is required (apt-get install nodejs npm)"; exit 1; }
npm ci --no-audit --no-fund
npm --prefix ui ci --no-audit --no-fund

export PATH="$HOME/.cargo/bin:$PATH"
command -v tauri-driver >/dev/null || cargo install tauri-driver --locked

make e2e
