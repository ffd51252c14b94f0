#!/usr/bin/env bash
# Creates .venv (gitignored) with the local AWS tooling: moto's server (S3 and
# DynamoDB on loopback), cfn-lint, cargo-lambda and the zig it links with.
# Idempotent: a second run only checks the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r infra/requirements.txt
