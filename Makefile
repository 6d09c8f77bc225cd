# Leadgate's everyday commands. `make demo` and `make test` are the README's Quick start:
# each installs what it needs on a fresh Debian machine.

SHELL := bash
export LEADGATE_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: test check lint unit demo bench

## Every check: formatting, lints with warnings denied, and all tests on SQLite and PostgreSQL.
test: lint unit

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets --locked -- -D warnings

unit:
	scripts/ensure-postgres.sh
	cargo test --locked

## The eight pilot scenarios against a fake Bitrix24 on embedded SQLite, as a table.
demo:
	scripts/demo.sh

## Intake throughput/latency vs. the raw commit rate, on SQLite and PostgreSQL (release build).
bench:
	scripts/ensure-postgres.sh
	cargo bench --locked --bench intake

include console.mk
