#!/usr/bin/env bash
# The whole test suite: unit, property, conformance (embedded and AWS adapters
# on moto) and end-to-end tests. Sets up .venv (moto, cfn-lint, cargo-lambda)
# first; the tests that need moto start its server themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
infra/setup.sh
cargo test --workspace --all-targets "$@"
