#!/usr/bin/env bash
# The whole test suite: unit, property, conformance (embedded and AWS adapters
# on moto), end-to-end, the deterministic simulation's CI budget, 30 s of
# every fuzz target (infra/fuzz.sh; nightly toolchain), schemathesis against
# `serve` (infra/schemathesis.sh), `GET /metrics` against the describes
# (infra/metrics_check.py) and the dashboard in headless Chromium (infra/browser.sh). Sets up
# .venv (moto, cfn-lint, cargo-lambda) first; the tests that need moto start
# its server themselves.
#
# With arguments, they go to one `cargo test --workspace --all-targets` (e.g. a
# filter: `infra/test.sh -- queue::`), and nothing else runs.
#
# Without, everything is built once, then run as lanes side by side: each
# moto suite serves one request at a time from a Python process of its own, so
# they are bound by one core each and run beside the rest rather than after it.
set -euo pipefail
cd "$(dirname "$0")/.."
infra/setup.sh
if [ "$#" -gt 0 ]; then
    exec cargo test --workspace --all-targets "$@"
fi

cargo test --workspace --all-targets --no-run
cargo build --profile sim -p sluice-sim

logs=$(mktemp -d)
lane() {
    local name=$1
    shift
    if "$@" >"$logs/$name.log" 2>&1; then
        echo "lane $name: ok ($SECONDS s since start)"
    else
        echo "lane $name: FAILED ($SECONDS s since start)"
        touch "$logs/$name.failed"
    fi
}

# Every lane selects the whole workspace (`--workspace` and a target filter), never one
# package: cargo unifies dependency features over the packages a command selects, and a
# narrower selection would rebuild crates the build above has made.
# moto_realism runs on a moto with DynamoDB's latency and conflict rule (infra/moto_realism.py).
moto_suites=(moto moto_retention moto_push moto_realism)
# (Assigned first: a failure inside `for … in $(…)` would not stop the script.)
test_names=$(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    print("\n".join(t["name"] for t in p["targets"] if "test" in t["kind"]))')
other_tests=()
for name in $test_names; do
    case " ${moto_suites[*]} " in *" $name "*) ;; *) other_tests+=(--test "$name") ;; esac
done
if [ "${#other_tests[@]}" -eq 0 ]; then
    echo "no test targets found by cargo metadata" >&2
    exit 1
fi

for suite in "${moto_suites[@]}"; do
    lane "$suite" cargo test --workspace --test "$suite" &
done
lane fuzz infra/fuzz.sh &
lane schemathesis infra/schemathesis.sh &
# GET /metrics against the describes (prometheus_client's parser), then the dashboard in
# headless Chromium (infra/browser.sh).
lane observability bash -c ".venv/bin/python infra/metrics_check.py && infra/browser.sh" &
lane rest bash -c "
    set -e
    cargo test --workspace --lib --bins --examples --benches ${other_tests[*]}
    cargo test --workspace --doc
    cargo run -q --profile sim -p sluice-sim -- --seeds \${SIM_SEEDS:-1000..1400} --steps \${SIM_STEPS:-2000}
" &
wait

failed=0
for log in "$logs"/*.log; do
    name=$(basename "$log" .log)
    if [ -e "$logs/$name.failed" ]; then
        failed=1
        echo "===== lane $name failed; its output:"
        cat "$log"
    else
        # What each lane ran, in brief: the result lines of its test binaries.
        grep -E "^test result|Running|seeds|fuzz|metrics check|^ℹ (tests|pass|fail) " "$log" | sed "s/^/[$name] /" || true
    fi
done
rm -rf "$logs"
exit "$failed"
