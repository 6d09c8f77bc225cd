#!/usr/bin/env bash
# `make fuzz`: runs every cargo-fuzz target in fuzz/ for FUZZ_SECONDS (default 60) on its
# corpus in fuzz/corpus/<target> (kept in the repository; new inputs libFuzzer finds are
# added there). A crash stops with the input under fuzz/artifacts/<target>/: turn it into a
# regular test. cargo-fuzz needs nightly features: RUSTC_BOOTSTRAP=1 on stable Rust.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
if ! command -v cargo-fuzz >/dev/null; then
  echo "== installing cargo-fuzz (once) ..."
  cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1
secs="${FUZZ_SECONDS:-60}"
cargo fuzz build -O
for target in $(cargo fuzz list); do
  mkdir -p "corpus/$target"
  echo "== fuzzing $target for ${secs}s"
  cargo fuzz run -O "$target" "corpus/$target" -- -max_total_time="$secs" -max_len=4096 -timeout=10
done
