# Leadgate's everyday commands. `make demo` and `make test` are the README's Quick start:
# each installs what it needs on a fresh Debian machine.

SHELL := bash
export LEADGATE_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: test check lint unit test-loaded test-n8n test-n8n-package test-api test-n8n-node demo bench walk-through chaos fleet fleet-chaos fuzz

## Every check: formatting, lints with warnings denied, every Rust test on SQLite and
## PostgreSQL (the web console in Chromium among them), the UI's type check and unit tests,
## the console in a real window, the HTTP contract fuzzed against a live gateway and the n8n
## community node's tests.
test: lint unit test-console e2e test-api test-n8n-node

## The workspace includes the console, so these need WebKitGTK: installed when missing.
lint:
	scripts/install-console-deps.sh
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --locked --features leadgate-console/e2e -- -D warnings
	# the product as it ships: without the test kit's `test-support`
	cargo clippy -p leadgate --lib --bins --locked -- -D warnings
	scripts/deny.sh

## tests/n8n.rs and tests/n8n_package.rs (part of `cargo test --workspace`) run the n8n example and
## the packed community node in a real n8n:
## installed first, once, under /var/tmp; a failed install fails here.
## tests/browser/ drives the web console in Chromium and Firefox ESR: the browsers, their drivers and the
## built UI come first.
unit: ui/node_modules
	scripts/install-console-deps.sh
	scripts/install-test-deps.sh
	scripts/install-browser-deps.sh
	scripts/ensure-postgres.sh
	scripts/install-n8n.sh >/dev/null
	npm --prefix ui run build
	cargo test --workspace --locked

## `unit`'s Rust tests with the machine loaded by `stress-ng --cpu $(LOAD_CPUS)` (default 2;
## installed when missing, stopped afterwards whatever happens): no test may depend on the
## machine's speed. TEST_ARGS narrows it (`make test-loaded TEST_ARGS="--test it outage"`).
LOAD_CPUS ?= 2
test-loaded:
	LOAD_CPUS=$(LOAD_CPUS) scripts/test-loaded.sh $(TEST_ARGS)

## Only the real-n8n test (both backends), with its figures.
test-n8n:
	scripts/ensure-postgres.sh
	scripts/install-n8n.sh >/dev/null
	cargo test --locked --test n8n -- --nocapture

## Only the community node's package test (tests/n8n_package.rs, part of `unit`): n8n's lint
## and scanner, `npm pack`, the tarball installed into the real n8n and run there, and the
## node's tests on the installed package.
test-n8n-package:
	scripts/ensure-postgres.sh
	scripts/install-n8n.sh >/dev/null
	cargo test --locked --test n8n_package -- --nocapture

## Schemathesis (pinned, from PyPI, into a virtualenv under /var/tmp) against a live
## `leadgate serve` on SQLite with a fake Bitrix24, from the gateway's own /openapi.json:
## a bounded number of requests per endpoint, no 5xx, every answer as documented.
test-api:
	scripts/contract-test.sh

## The n8n community node (examples/n8n/n8n-nodes-leadgate): npm ci, n8n's lint, tsc, and its vitest
## tests against a live gateway.
test-n8n-node:
	scripts/test-n8n-node.sh

## The eight pilot scenarios (and a cross-channel one) against a fake Bitrix24 on embedded SQLite, as a table.
demo:
	scripts/demo.sh

## The chaos run of `make test` at full size (tests/chaos/main.rs): 3,000 leads over five
## minutes per backend, release build. It prints its figures.
chaos:
	scripts/install-test-deps.sh
	scripts/ensure-postgres.sh
	LEADGATE_CHAOS_LEADS=3000 LEADGATE_CHAOS_SECONDS=300 \
	  cargo test --locked --release --test chaos -- --nocapture --test-threads=1

## The fleet's noisy neighbours at full size (tests/fleet.rs, release build): 500 tenants
## on fake Bitrix24s enforcing 2 requests/s, a dead portal with 50,000 leads queued and a
## tenant flooding 100 leads/s; the quiet tenants' p95 against their baseline of the same run,
## per backend; and 500 tenants onboarded from one CSV by `leadgate tenant apply`, then
## re-applied. Figures: BENCHMARKS.md.
fleet:
	scripts/ensure-postgres.sh
	LEADGATE_FLEET_TENANTS=500 LEADGATE_FLEET_LEADS=3 LEADGATE_FLEET_BACKLOG=50000 LEADGATE_FLEET_FLOOD=100 \
	  LEADGATE_FLEET_ONBOARD=500 \
	  cargo test --locked --release --test fleet -- --nocapture --test-threads=1

## The fleet's compressed day at a larger size (tests/chaos/fleet.rs, release build): 40
## tenants on chaotic fake Bitrix24 portals and amoCRM accounts at their documented limits,
## 20,000 leads over 10 minutes, 30 % redelivered, two gateways killed with SIGKILL every
## couple of seconds, PostgreSQL crashed once. Figures: BENCHMARKS.md. Larger days:
## `make fleet-chaos FLEET_TENANTS=500 FLEET_LEADS=100000 FLEET_SECONDS=900 FLEET_SENDERS=64
## FLEET_KILLS=2` (the leads sent at an even pace by that many requests at once, two kills
## spread over the traffic); FLEET_ONLY=fleet::postgres (or fleet::sqlite) runs one backend.
FLEET_TENANTS ?= 40
FLEET_LEADS ?= 20000
FLEET_SECONDS ?= 600
FLEET_SENDERS ?= 1
FLEET_ONLY ?= fleet
fleet-chaos:
	scripts/ensure-postgres.sh
	LEADGATE_FLEET_CHAOS_TENANTS=$(FLEET_TENANTS) LEADGATE_FLEET_CHAOS_LEADS=$(FLEET_LEADS) \
	  LEADGATE_FLEET_CHAOS_SECONDS=$(FLEET_SECONDS) LEADGATE_FLEET_CHAOS_SENDERS=$(FLEET_SENDERS) \
	  $(if $(FLEET_KILLS),LEADGATE_FLEET_CHAOS_KILLS=$(FLEET_KILLS)) \
	  cargo test --locked --release --test chaos $(FLEET_ONLY) -- --nocapture --test-threads=1

## Intake throughput/latency vs. the raw commit rate (and pgbench on PostgreSQL, when
## installed), the console's calls over a million operations, 50 people in the web console
## beside a loaded intake, and a 10,000-lead backlog
## drained at the CRMs' documented limits, on SQLite and PostgreSQL (release build).
## Figures: BENCHMARKS.md.
bench:
	scripts/ensure-postgres.sh
	cargo bench --locked --bench intake
	cargo bench --locked --bench console
	cargo bench --locked --bench web_console
	LEADGATE_TEST_DATABASE_URL=$${LEADGATE_BENCH_DATABASE_URL:-$$LEADGATE_TEST_DATABASE_URL} \
	  cargo bench --locked --bench drain

## The console's walk-through in actions and seconds (support's "did my lead arrive?", sales
## ops' uncertain case) with the UI before issue 37 (built from git) and today's, in Chromium
## on PostgreSQL. Figures: BENCHMARKS.md.
walk-through:
	scripts/ensure-postgres.sh
	scripts/walk-through.sh

## Every cargo-fuzz target (fuzz/) for FUZZ_SECONDS (default 60) each, on the corpus kept
## in fuzz/corpus/. Stable Rust with RUSTC_BOOTSTRAP=1; installs cargo-fuzz when missing.
fuzz:
	scripts/fuzz.sh

include console.mk

# Packages and the examples around the gateway (issue 21). tests/ecosystem.rs, part of
# `unit`, needs what ecosystem-deps installs (promtool, dpkg-dev, systemd-analyze).
.PHONY: package package-console test-ecosystem ecosystem-deps
unit: ecosystem-deps

## The .deb of `leadgate` (release build): $CARGO_TARGET_DIR/debian/leadgate_<version>_<arch>.deb
## (default target/debian/), built by scripts/package-deb.sh from packaging/deb/.
package:
	scripts/install-ecosystem-deps.sh --packaging
	scripts/package-deb.sh

## The console's .deb (release build, Tauri's bundler): $CARGO_TARGET_DIR/debian/leadgate-console_<version>_<arch>.deb
## (default target/debian/). The real-window test (make e2e) packages its debug binary,
## installs it, opens it and removes it.
package-console: console-deps
	scripts/install-console-deps.sh
	scripts/package-console.sh

## Only tests/ecosystem.rs (part of `unit`): the Grafana dashboard and alert rules against a
## real gateway's /metrics and promtool, and the .deb built from the debug binary, installed
## with dpkg, run, verified with systemd-analyze and purged.
test-ecosystem: ecosystem-deps
	cargo test --locked --test ecosystem -- --nocapture

ecosystem-deps:
	scripts/install-ecosystem-deps.sh
