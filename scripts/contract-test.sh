#!/usr/bin/env bash
# `make test-api`: Schemathesis (scripts/install-schemathesis.sh, a pinned version from
# PyPI) against a live gateway (scripts/live-gateway.sh: `leadgate serve` on SQLite with a
# fake Bitrix24), reading the document the gateway serves at /openapi.json. Every endpoint
# gets at most SCHEMATHESIS_EXAMPLES (default 100) generated requests per phase, with the
# integration token and the `web` source's token (scripts/schemathesis.toml names it as the
# intake's source), so the claim API, the reads and a real source's intake are reached past
# authentication. One worker: CPython 3.11's ast module is not thread-safe, and Hypothesis
# parses its lambdas' source in each worker thread (a SystemError in the examples phase). A 5xx, an answer whose status, content
# type, headers or body the document does not describe, fails the run.
#
#   SCHEMATHESIS_EXAMPLES  examples per operation (default 100)
#   SCHEMATHESIS_SEED      reproduce a run (Schemathesis prints the seed it used)
set -euo pipefail
cd "$(dirname "$0")/.."

st="$(scripts/install-schemathesis.sh)"
export SCHEMATHESIS_BIN="$st" SCHEMATHESIS_CONFIG="$PWD/scripts/schemathesis.toml"
start=$(date +%s)
scripts/live-gateway.sh bash -c '
  set -euo pipefail
  seed=()
  [ -n "${SCHEMATHESIS_SEED:-}" ] && seed=(--seed "$SCHEMATHESIS_SEED")
  # Schemathesis keeps a cache of failures in its working directory: the run directory.
  cd "$LEADGATE_DIR"
  report="$LEADGATE_DIR/schemathesis"
  "$SCHEMATHESIS_BIN" --config-file "$SCHEMATHESIS_CONFIG" run "$LEADGATE_URL/openapi.json" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --phases examples,coverage,fuzzing \
    --max-examples "${SCHEMATHESIS_EXAMPLES:-100}" \
    --workers 1 \
    --request-timeout 10 \
    --suppress-health-check all \
    -H "Authorization: Bearer $LEADGATE_INTEGRATION_TOKEN" \
    -H "X-Leadgate-Token: $LEADGATE_SOURCE_TOKEN" \
    --report junit --report-dir "$report" \
    --generation-database none \
    --no-color "${seed[@]}"
'
echo "== schemathesis against the live gateway: $(( $(date +%s) - start )) s" >&2
