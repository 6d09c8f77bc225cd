#!/usr/bin/env bash
# What the web console's browser tests (tests/browser.rs) need, installed only when
# missing: Debian's Chromium and its WebDriver (chromedriver of the same version), and
# Debian's Firefox ESR with geckodriver, Mozilla's WebDriver, built from crates.io (Debian
# does not ship it). Nothing is downloaded at run time. `make test` calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-install-missing.sh "the browser tests" chromium chromium-driver firefox-esr

export PATH="$HOME/.cargo/bin:$PATH"
# The release this was checked with; `--locked` builds it with its own lock file.
GECKODRIVER_VERSION=0.37.1
if ! geckodriver --version 2>/dev/null | grep -q "geckodriver $GECKODRIVER_VERSION"; then
  echo "== installing geckodriver $GECKODRIVER_VERSION (crates.io) ..."
  cargo install geckodriver --version "$GECKODRIVER_VERSION" --locked --quiet
fi
