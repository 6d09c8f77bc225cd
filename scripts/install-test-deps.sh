#!/usr/bin/env bash
# What the test suite needs beyond the console's packages, installed only when missing:
# Debian's libfaketime (package `faketime`), which tests/it/clock.rs preloads into a real
# `leadgate serve` to run it with a clock 25 s ahead. `make test` and `make chaos` call it.
set -euo pipefail
packages=(faketime)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "== installing Debian packages for the tests: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
