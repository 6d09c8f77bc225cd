# The operator console (src-tauri/, ui/). Included from the Makefile.
#   make console       build the UI and the console (debug), ready to run
#   make console-run   run it (LEADGATE_DATABASE_URL or the first-run screen)
#   make test-console  UI type check + Vitest (part of `make test`)
#   make e2e           the console in a real window (Xvfb + WebDriver), screenshots to docs/screenshots
#                      (part of `make test`)

.PHONY: console console-run console-deps test-console e2e

CONSOLE_BIN = $${CARGO_TARGET_DIR:-target}/debug/leadgate-console

ui/node_modules: ui/package-lock.json
	@command -v npm >/dev/null || { echo "Node.js 20+ and npm are required (apt-get install nodejs npm)" >&2; exit 1; }
	npm --prefix ui ci --no-audit --no-fund
	@touch $@

node_modules: package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

console-deps: ui/node_modules node_modules

## Builds the UI, then the console binary that embeds it.
console: console-deps
	scripts/install-console-deps.sh
	npm --prefix ui run build
	cargo build --locked --workspace

console-run: console
	$(CONSOLE_BIN) $(if $(LEADGATE_DATABASE_URL),--database-url $(LEADGATE_DATABASE_URL))

## UI type check and UI unit tests (the generated TypeScript types' freshness is a Rust
## test: tests/it/console.rs, bindings_are_fresh).
test-console: ui/node_modules
	npm --prefix ui run check
	npm --prefix ui test

## The real-window end-to-end test under Xvfb, through tauri-driver and WebKitWebDriver
## (scripts/install-console-deps.sh installs what is missing).
e2e: ui/node_modules
	scripts/install-console-deps.sh
	npm --prefix ui run build
	scripts/e2e.sh
