#!/usr/bin/env bash
# The dashboard `sluice serve` shows at `/`, driven in headless Chromium: builds the `sluice`
# binary (with the workspace's tests, as infra/test.sh does), installs tests/browser's npm
# packages (playwright-core) when its node_modules is missing, and runs node's test runner
# there (tests/browser/dashboard.test.mjs), which starts its own server on a free loopback
# port over a fresh data directory and stops it. Needs node 20 or later and Chromium at
# /usr/bin/chromium (infra/setup.sh installs it; CHROMIUM names another). Leaves a
# screenshot in target/browser/dashboard.png. About 15 s once built.
# Extra arguments go to `node --test` (e.g. --test-name-pattern tail).
set -euo pipefail
cd "$(dirname "$0")/.."

# The build infra/test.sh makes (a no-op after it): the same selection, so nothing rebuilds.
cargo test --workspace --all-targets --no-run -q
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
    echo "no Chromium at $chromium: run infra/setup.sh (or set CHROMIUM)" >&2
    exit 1
fi
if [ ! -d tests/browser/node_modules ]; then
    (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi
cd tests/browser
node --test --test-reporter=spec --test-timeout=120000 "$@"
