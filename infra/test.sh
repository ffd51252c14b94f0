#!/usr/bin/env bash
# The whole test suite: unit, property, conformance and end-to-end tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets "$@"
