#!/usr/bin/env bash
# Reproduces the figures in docs/PERFORMANCE.md: starts a release `sluice serve` on a
# fresh data dir, runs each `sluice-bench` workload three times, and prints the median
# and spread of each figure plus the server's peak RSS. Usage: infra/perf.sh [seconds]
# (SLUICE_BIN=path uses that server binary, SLUICE_BENCH_BIN=path that bench binary,
# instead of building them.)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
if [ -z "${SLUICE_BIN:-}" ] || [ -z "${SLUICE_BENCH_BIN:-}" ]; then cargo build --release --quiet -p sluice -p sluice-bench; fi
bin=${SLUICE_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}
bench=${SLUICE_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice-bench}
data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
"$bin" serve --addr "127.0.0.1:$port" --data-dir "$data" >"$data.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$data" "$data.log"' EXIT
until curl -sf "$url/v1/topics" >/dev/null; do sleep 0.1; done

run() { # name, bench args…: three runs, one JSON report per line
  local name=$1; shift
  # A failed run (e.g. a queue run that did not ack every message exactly once) still
  # prints its report; the summary shows why, and the script exits non-zero at the end.
  for _ in 1 2 3; do "$bench" --url "$url" --json "$@" 2>/dev/null | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' || failed=1; done >"$data.$name"
  python3 - "$name" "$data.$name" <<'PY'
import json, statistics, sys
name, path = sys.argv[1], sys.argv[2]
runs = [json.loads(l) for l in open(path)]
def fig(get):
    xs = sorted(get(r) for r in runs)
    return f"{statistics.median(xs):>10.3f} ({xs[0]:.3f}–{xs[-1]:.3f})"
print(f"{name}: {json.dumps(runs[0]['settings'])}")
print(f"  {'events/s':<18} {fig(lambda r: r['events_per_sec'])}")
print(f"  {'MB/s':<18} {fig(lambda r: r['mb_per_sec'])}")
print(f"  {'requests/s':<18} {fig(lambda r: r['requests_per_sec'])}")
of = runs[0].get("latency_of", "request")
for q in ("p50", "p99", "p999", "max"):
    print(f"  {q:<18} {fig(lambda r: r['latency_ms'][q])} ms" + ("" if of == "request" else f" ({of})"))
for c in sorted({c for r in runs for c in r.get("counts", {})}):
    print(f"  {c + '/s':<18} {fig(lambda r: r['counts'].get(c, {}).get('per_sec', 0))}")
for h in runs[0].get("latencies_ms", {}):
    for q in ("p50", "p99"):
        print(f"  {h + ' ' + q:<18} {fig(lambda r: r['latencies_ms'][h][q])} ms")
for r in runs:
    if r.get("failure"):
        print(f"  {'FAILED':<18} {r['failure']}")
PY
}

run publish-batched --topic batched publish --batch 100 --clients 8 --event-size 1024 --duration "$secs"
run publish-single --topic single publish --batch 1 --clients 64 --event-size 1024 --duration "$secs"
run latency --topic latency latency --event-size 1024 --count 10000
"$bench" --url "$url" --topic replay publish --batch 100 --clients 8 --count 1000000 >/dev/null 2>&1
run replay --topic replay replay --limit 1000
# Consumer groups: 4 members committing after every poll; a 1,000,000-event backlog drained,
# then 8 live single-event publishers timed from publish to delivery (members long-poll).
run group-backlog --topic group-backlog group --members 4 --max-events 1000 --publishers 0 --count 1000000
run group-live --topic group-live group --members 4 --max-events 1000 --wait-ms 1000 --publishers 8 --duration "$secs"
# Work queues: 4 workers of a fresh subscription (start earliest) drain a backlog, each
# receive followed by the ack of all its receipts, batches of 10 and of 100 (a run fails
# unless every message was acked exactly once); then 8 live single-event publishers, timed
# from publish to ack.
run queue-b10 --topic queue-b10 queue --workers 4 --batch 10 --count 200000
run queue-b100 --topic queue-b100 queue --workers 4 --batch 100 --count 1000000
run queue-live --topic queue-live queue --workers 4 --batch 10 --wait-ms 1000 --publishers 8 --duration "$secs"
echo "server peak RSS: $(awk '/VmHWM/ {printf "%.1f MiB", $2/1024}' /proc/$server/status)"
echo "data dir: $(du -sh "$data" | cut -f1)"
exit "${failed:-0}"
