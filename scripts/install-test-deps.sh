#!/usr/bin/env bash
# What the test suite needs beyond the console's packages, installed only when missing:
# Debian's libfaketime (package `faketime`), which tests/it/clock.rs preloads into a real
# `leadgate serve` to run it with a clock 25 s ahead, and Dovecot's IMAP server
# (`dovecot-imapd`), which tests/it/imap.rs starts on a loopback port of its own as the
# mailbox of the `imap` source; and PyPI's `standardwebhooks` (scripts/install-standardwebhooks.sh),
# with which tests/it/feed.rs's receiver verifies the event feed's signatures. `make test` and
# `make chaos` call it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-install-missing.sh "the tests" faketime dovecot-imapd
# PyPI's standardwebhooks in a virtualenv under /var/tmp, for tests/it/feed.rs's receiver.
scripts/install-standardwebhooks.sh >/dev/null
