#!/usr/bin/env bash
# Property-based tests of the HTTP API against its OpenAPI document (GET /openapi.json, the
# same as docs/openapi.json): starts `sluice serve` on a free loopback port with a fresh data
# directory, runs schemathesis (installed into .venv by infra/setup.sh) against it, and
# stops the server. Checks: no 5xx; every answer passes its documented schema; every status
# is documented (so every 4xx is a JSON error whose code the operation lists); documented
# content types and headers. First, a Python client generated from the same document by
# openapi-python-client runs a short story against that server (infra/openapi_client.py).
#
# Bounded: SCHEMATHESIS_MAX_EXAMPLES cases per operation and phase (default 25), over the
# examples, coverage and fuzzing phases (no stateful phase), one worker (two hit a race in
# hypothesis: "AST constructor recursion depth mismatch"); under a minute once built.
# Extra arguments go to `schemathesis run` (e.g. --include-operation-id publish, --seed N).
set -euo pipefail
cd "$(dirname "$0")/.."

# The build infra/test.sh makes (a no-op after it): the same selection, so nothing rebuilds.
cargo test --workspace --all-targets --no-run -q
[ -x .venv/bin/schemathesis ] || infra/setup.sh

work=$(mktemp -d)
RUST_LOG=warn target/debug/sluice serve --addr 127.0.0.1:0 --data-dir "$work/data" >"$work/out" 2>"$work/err" &
server=$!
stop() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT

base=
for _ in $(seq 100); do
    base=$(sed -n 's/^listening on //p' "$work/out")
    [ -n "$base" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$base" ]; then
    echo "sluice serve did not start:" >&2
    cat "$work/err" >&2
    exit 1
fi

"$PWD/.venv/bin/python" infra/openapi_client.py "$base"

# Long polls (wait_ms) are capped at 1 s by hooks: the document allows 20 s, and a fuzzer
# that asks for it on an empty queue would spend the run waiting. Run from the scratch
# directory, where schemathesis and hypothesis leave their caches.
root=$PWD
cd "$work"
SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH="$root/infra" "$root/.venv/bin/schemathesis" run "$base/openapi.json" \
    --url "$base" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --phases examples,coverage,fuzzing \
    --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-25}" \
    --workers 1 \
    --request-timeout 30 \
    --generation-database none \
    --no-color \
    "$@"
