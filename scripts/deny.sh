#!/usr/bin/env bash
# Licences, banned crates and crate sources of the whole dependency graph (cargo-deny).
# Installs cargo-deny from crates.io when missing; needs no network beyond the registry.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-deny >/dev/null; then
  echo "== installing cargo-deny (once) ..."
  cargo install --locked cargo-deny
fi
cargo deny --log-level error check licenses bans sources
