# The operator console (src-tauri/, ui/). Included from the Makefile.
#   make console       build the UI and the console (debug), ready to run
#   make console-run   run it (LEADGATE_DATABASE_URL or the first-run screen)
#   make test-console  UI type check + Vitest + ts-rs freshness (part of `make test`)
#   make e2e           the console in a real window (Xvfb + WebDriver), screenshots to docs/screenshots

.PHONY: console console-run console-deps test-console e2e

CONSOLE_BIN = $${CARGO_TARGET_DIR:-target}/debug/leadgate-console

ui/node_modules: ui/package-lock.json
	npm --prefix ui ci --no-audit --no-fund
	@touch $@

node_modules: package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

console-deps: ui/node_modules node_modules

## Builds the UI, then the console binary that embeds it.
console: console-deps
	npm --prefix ui run build
	cargo build --locked --workspace

console-run: console
	$(CONSOLE_BIN) $(if $(LEADGATE_DATABASE_URL),--database-url $(LEADGATE_DATABASE_URL))

## UI type check, UI unit tests, and the generated TypeScript types' freshness.
test-console: ui/node_modules
	npm --prefix ui run check
	npm --prefix ui test
	cargo test --locked --test it console::bindings_are_fresh
	cargo clippy --locked --workspace --all-targets --features leadgate-console/e2e -- -D warnings

## The real-window end-to-end test. Needs the Debian packages and tauri-driver
## (scripts/ci-console.sh installs what is missing).
e2e: console-deps
	npm --prefix ui run build
	scripts/e2e.sh
