#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz, libFuzzer): builds every target in fuzz/ once, runs
# each for FUZZ_SECONDS (default 30) from the committed corpus, and fails if any target
# crashed, panicked, hung (10 s on one input) or ran out of memory (2 GB).
#
#   infra/fuzz.sh                               # every target, 30 s each (CI)
#   FUZZ_SECONDS=3600 infra/fuzz.sh publish     # one target, an hour
#   FUZZ_SECONDS=0 infra/fuzz.sh                # only replay the committed corpus
#
# What the fuzzer finds new goes to a temporary directory, never into fuzz/corpus (see
# fuzz/README.md to keep some). A failing input is kept in fuzz/artifacts/<target>/; replay
# it with `cargo +nightly fuzz run -O -a -s none <target> fuzz/artifacts/<target>/<file>`.
#
# Needs a nightly toolchain (FUZZ_TOOLCHAIN, default `nightly`); installs cargo-fuzz if it
# is missing. Targets are built with optimizations and debug assertions (overflow checks
# on), without a sanitizer: the code fuzzed has no `unsafe` of its own, and AddressSanitizer
# made the targets 5 to 12 times slower. FUZZ_SANITIZER=address puts it back.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-30}
toolchain=${FUZZ_TOOLCHAIN:-nightly}
flags=(--release --debug-assertions --sanitizer "${FUZZ_SANITIZER:-none}")

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

started=$SECONDS
# fuzz/Cargo.lock is committed and current: a run that would rewrite it stops here instead.
cargo +"$toolchain" metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null
cargo +"$toolchain" fuzz build "${flags[@]}"
echo "fuzz: built in $((SECONDS - started)) s"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +"$toolchain" fuzz list)
fi

work=$(mktemp -d)
# The targets' embedded backends: in memory where there is /dev/shm (their fsyncs are then
# free), and removed with the rest even after a crash.
data=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
export SLUICE_FUZZ_DIR=$data
trap 'rm -rf "$work" "$data"' EXIT
failed=()
for target in "${targets[@]}"; do
    mkdir -p "$work/$target"
    options=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
    if [ "$seconds" -gt 0 ]; then
        options+=(-max_total_time="$seconds")
    else
        options+=(-runs=0)
    fi
    if [ -f "fuzz/dicts/$target.dict" ]; then
        options+=(-dict="fuzz/dicts/$target.dict")
    fi
    log="$work/$target.log"
    target_started=$SECONDS
    # The first corpus directory receives new inputs; the committed one is only read.
    if cargo +"$toolchain" fuzz run "${flags[@]}" "$target" "$work/$target" "fuzz/corpus/$target" -- \
        "${options[@]}" >"$log" 2>&1; then
        outcome=ok
    else
        outcome=FAILED
        failed+=("$target")
        # The panic, the frames in this repository, what libFuzzer says, and the input.
        grep -A1 "panicked at" "$log" | head -n 6 || true
        grep -E "^ +at \./(crates|fuzz)/" "$log" | head -n 12 || true
        grep -E "ERROR: libFuzzer|^SUMMARY|Test unit written|^Base64" "$log" || true
    fi
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
    echo "fuzz: $target $outcome in $((SECONDS - target_started)) s ${done_line:-(no final stats)}"
done

echo "fuzz: ${#targets[@]} targets in $((SECONDS - started)) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
