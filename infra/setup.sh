#!/usr/bin/env bash
# Creates .venv (gitignored) with the local AWS tooling: moto's server (S3 and
# DynamoDB on loopback), cfn-lint, cargo-lambda and the zig it links with, and
# the AWS SAM CLI (sam validate / build / deploy); and schemathesis and
# openapi-python-client, which infra/schemathesis.sh runs against `serve`; and for
# infra/browser.sh, Debian's Chromium (when /usr/bin/chromium is missing; as root) and
# tests/browser's npm packages (when its node_modules is missing).
# Idempotent: a second run only checks the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
# A venv whose creation failed part way (ensurepip, e.g. on a full disk) has a python but
# no pip: made again from scratch, and a failure says how much room the disk has.
if [ ! -x .venv/bin/pip ]; then
    rm -rf .venv
    if ! python3 -m venv .venv; then
        echo "error: python3 -m venv .venv failed; free space here:" >&2
        df -h . >&2
        exit 1
    fi
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r infra/requirements.txt
# The functions run on arm64 (template.yaml); sam build cross-compiles them with
# cargo lambda and zig, which needs the aarch64 Rust standard library. Not fatal:
# only sam build needs it, and tests run on the host target.
if command -v rustup >/dev/null 2>&1; then
    timeout 120 rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 ||
        echo "warning: could not add the aarch64-unknown-linux-gnu Rust target; sam build needs it" >&2
fi
# The dashboard's browser test drives Debian's Chromium with playwright-core (no browser
# download from npm).
if [ ! -x /usr/bin/chromium ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
if [ ! -d tests/browser/node_modules ]; then
    if command -v npm >/dev/null 2>&1; then
        (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
    else
        echo "warning: npm not found; infra/browser.sh needs node 20+ and npm" >&2
    fi
fi
