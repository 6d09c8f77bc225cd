#!/usr/bin/env bash
# What the web console's browser tests (tests/browser.rs) need, installed only when
# missing: Debian's Chromium and its WebDriver (chromedriver of the same version). Nothing
# is downloaded at run time. `make test` calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-install-missing.sh "the browser tests" chromium chromium-driver
