#!/usr/bin/env bash
# Sluice side by side with NATS JetStream and Redis (AOF `always`) on this machine, with
# the workloads of ../shared/peerbench (see its README), then issue 48's targets as ratios.
#
# Per repetition, one system after another so they share the machine's state: the
# machine's limits (4 KiB append + fdatasync; the HTTP ceiling: wrk against peerbench's
# minimal server), then for NATS, Redis and a release `sluice serve` on a fresh data
# directory: W1 publish (1 KiB, 256 in flight; Sluice with 100 events per request), W3
# replay, W4 work queue (4 consumers, batches of 10, then of 100) and W2 latency; for
# Sluice also single-event publishes from wrk at 64 connections and a consumer group fed
# live (sluice-bench: 4 members, 8 single-event publishers) and a push subscription fed
# live (10,000 events/s for 5 s, batches of 10, to a receiver in sluice-bench; no peer
# runs push). Sluice's peak RSS is read from /proc at the end.
#
# Usage: infra/side_by_side.sh [runs]   (default 1; knobs: MAXMSGS=200000 MAXSECS=20
# LATSECS=10; SLUICE_BIN and SLUICE_BENCH_BIN measure those binaries instead of building
# them, for interleaved before/after runs; PEERS=0 skips the peers). The peers need
# nats-server, redis-server and wrk (Debian: `apt-get install nats-server redis-server
# wrk`); one that is missing is skipped with a message, and without ../shared/peerbench
# (PEERBENCH_DIR) the whole comparison is (infra/perf.sh measures Sluice alone). Results:
# the printed table, and every JSON line in $OUT/results.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
pb=$(realpath -m "${PEERBENCH_DIR:-../shared/peerbench}")
if [ ! -f "$pb/Cargo.toml" ]; then
    echo "side by side: no peerbench at $pb: peers skipped (infra/perf.sh measures Sluice alone)"
    exit 0
fi
runs=${1:-1}
MAXMSGS=${MAXMSGS:-200000} MAXSECS=${MAXSECS:-20} LATSECS=${LATSECS:-10}
if [ -z "${SLUICE_BIN:-}" ] || [ -z "${SLUICE_BENCH_BIN:-}" ]; then cargo build --release -q -p sluice -p sluice-bench; fi
sluice_bin=$(realpath "${SLUICE_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}")
bench_bin=$(realpath "${SLUICE_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice-bench}")
peers=${PEERS:-1}
cargo build --release -q --manifest-path "$pb/Cargo.toml" --target-dir target/peerbench
B=$root/target/peerbench/release/peerbench
OUT=${OUT:-$(mktemp -d /tmp/side-by-side.XXXXXX)}
mkdir -p "$OUT"
export PEERBENCH_STATE=$OUT/state
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
log() { echo "[$(date +%T)] $*" >&2; }
# Sluice's peak and current RSS so far, once its server runs (which workload raised it).
sluice_rss() {
    [ -n "${sluice:-}" ] && awk '/VmHWM|VmRSS/ {printf " %s %.0f MiB", $1, $2/1024}' "/proc/$sluice/status" 2>/dev/null || true
}
have() { command -v "$1" >/dev/null 2>&1 || { log "skipped $2: $1 is not installed (apt-get install $1)"; return 1; }; }

# One JSON line per run, with the run number and a label of ours.
record() { # rep label cmd…
    local rep=$1 label=$2
    shift 2
    local line
    if line=$("$@" 2>>"$OUT/stderr.log"); then
        python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["run"]=int(sys.argv[2]); r["case"]=sys.argv[3]; print(json.dumps(r))' \
            "$line" "$rep" "$label" >>"$OUT/results.jsonl"
        log "ok   $label (run $rep)$(sluice_rss)"
    else
        log "FAIL $label (run $rep): see $OUT/stderr.log"
    fi
}

# wrk at 64 connections for 10 s; its requests/s and latencies as a JSON line.
wrk_json() { # rep label url script
    wrk -t2 -c64 -d10s --latency -s "$4" "$3" >"$OUT/wrk.txt" 2>&1
    python3 "$pb/scripts/wrk2json.py" <"$OUT/wrk.txt" |
        python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["run"]=int(sys.argv[1]); r["case"]=sys.argv[2]; print(json.dumps(r))' "$1" "$2" >>"$OUT/results.jsonl"
    log "ok   $2 (run $1)"
}

broker() { # rep subcommand label: the peer's share of a repetition
    local rep=$1 sub=$2 label=$3 c=(--max-msgs "$MAXMSGS" --max-secs "$MAXSECS")
    record "$rep" "$label w1" "$B" "$sub" --label "$label" --workload w1 --size 1024 --inflight 256 "${c[@]}"
    record "$rep" "$label w3" "$B" "$sub" --label "$label" --workload w3 --size 1024 "${c[@]}"
    record "$rep" "$label w4 b10" "$B" "$sub" --label "$label" --workload w4 --size 1024 --consumers 4 --batch 10 "${c[@]}"
    record "$rep" "$label w4 b100" "$B" "$sub" --label "$label" --workload w4 --size 1024 --consumers 4 --batch 100 "${c[@]}"
    record "$rep" "$label w2" "$B" "$sub" --label "$label" --workload w2 --size 1024 --max-msgs 200000 --max-secs "$LATSECS"
}

# Sluice: one server for the whole run, so its peak RSS covers every workload.
port=$(free_port)
url=http://127.0.0.1:$port
data=$(mktemp -d)
"$sluice_bin" serve --addr "127.0.0.1:$port" --data-dir "$data" >"$OUT/sluice.log" 2>&1 &
sluice=$!
http_server=
cleanup() {
    kill "$sluice" ${http_server:+"$http_server"} 2>/dev/null || true
    (cd "$pb" && { scripts/peers.sh stop nats || true; scripts/peers.sh stop redis || true; } >/dev/null 2>&1)
    rm -rf "$data"
}
trap cleanup EXIT
until curl -sf "$url/v1/topics" >/dev/null; do sleep 0.1; done
curl -sf -X PUT "$url/v1/topics/wrk-single" -H 'content-type: application/json' -d '{"partitions": 8}' >/dev/null
cat >"$OUT/publish1k.lua" <<'LUA'
-- One event of a 1 KiB string value per request, as a producer without batching sends.
wrk.method = "POST"
wrk.body = '{"events":[{"value":"' .. string.rep("x", 1024) .. '"}]}'
wrk.headers["Content-Type"] = "application/json"
LUA

for rep in $(seq 1 "$runs"); do
    record "$rep" "fsync" "$B" fsync --secs 5 --dir "$data" --mode append
    # The same write in place: no file growth, so no ext4 journal commit in its fdatasync
    # (what SQLite's WAL, rewritten in place after each checkpoint, pays). In a slow disk
    # period the two have differed 25 ×: both are shown, both judged.
    record "$rep" "fsync overwrite" "$B" fsync --secs 5 --dir "$data" --mode overwrite
    if have wrk "the HTTP ceiling and single-event publishes"; then
        hport=$(free_port)
        "$B" http-server --addr "127.0.0.1:$hport" 2>>"$OUT/stderr.log" &
        http_server=$!
        sleep 1
        wrk_json "$rep" "http ceiling" "http://127.0.0.1:$hport/" "$pb/scripts/post1k.lua"
        kill "$http_server"
        http_server=
    fi
    if [ "$peers" = 1 ] && have nats-server "NATS JetStream"; then
        (cd "$pb" && scripts/peers.sh start nats >/dev/null)
        broker "$rep" nats nats-js
        (cd "$pb" && scripts/peers.sh stop nats >/dev/null)
    fi
    if [ "$peers" = 1 ] && have redis-server "Redis"; then
        (cd "$pb" && scripts/peers.sh start redis-always >/dev/null)
        broker "$rep" redis redis-always
        (cd "$pb" && scripts/peers.sh stop redis >/dev/null)
    fi
    topic=sbs-$rep-$(date +%s)
    s=("$B" sluice --url "$url" --label sluice)
    c=(--max-msgs "$MAXMSGS" --max-secs "$MAXSECS")
    record "$rep" "sluice w1" "${s[@]}" --workload w1 --size 1024 --inflight 256 --events-per-request 100 --partitions 8 --topic "$topic" "${c[@]}"
    record "$rep" "sluice w3" "${s[@]}" --workload w3 --size 1024 --topic "$topic" "${c[@]}"
    record "$rep" "sluice w4 b10" "${s[@]}" --workload w4 --size 1024 --consumers 4 --batch 10 --topic "$topic" "${c[@]}"
    record "$rep" "sluice w4 b100" "${s[@]}" --workload w4 --size 1024 --consumers 4 --batch 100 --topic "$topic" "${c[@]}"
    record "$rep" "sluice w2" "${s[@]}" --workload w2 --size 1024 --events-per-request 1 --partitions 8 --topic "$topic-lat" --max-msgs 200000 --max-secs "$LATSECS"
    if have wrk "single-event publishes"; then
        wrk_json "$rep" "sluice single" "$url/v1/topics/wrk-single/events" "$OUT/publish1k.lua"
    fi
    record "$rep" "sluice group live" "$bench_bin" --url "$url" --json --topic "$topic-group" \
        group --members 4 --max-events 1000 --wait-ms 1000 --publishers 8 --duration 10
    record "$rep" "sluice push live" "$bench_bin" --url "$url" --json --topic "$topic-push" \
        push --rate 10000 --max-batch 10 --duration 5
done
rss_mib=$(awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$sluice/status")

python3 - "$OUT/results.jsonl" "$rss_mib" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rss = float(sys.argv[2])
def med(case, key):
    xs = [r[key] for r in rows if r.get("case") == case and r.get(key) is not None]
    return statistics.median(xs) if xs else None
def rate(case):
    return med(case, "msgs_per_s") or med(case, "events_per_sec") or med(case, "requests_per_s")
def show(x, unit=""):
    return "—" if x is None else f"{x:,.0f}{unit}" if x >= 100 else f"{x:.2f}{unit}"
def ratio(a, b):
    return None if a is None or not b else a / b

print(f"\n{'workload':<34} {'Sluice':>12} {'NATS JS':>12} {'Redis always':>13}")
for name, case in [("publish (Sluice: 100/request)", "w1"), ("replay", "w3"),
                   ("work queue, batches of 10", "w4 b10"), ("work queue, batches of 100", "w4 b100")]:
    print(f"{name:<34} {show(rate('sluice ' + case)):>12} {show(rate('nats-js ' + case)):>12} {show(rate('redis-always ' + case)):>13}")
for q in ("p50_us", "p99_us"):
    print(f"{'latency ' + q[:3] + ' (ms)':<34} " + " ".join(
        f"{show(None if med(c + ' w2', q) is None else med(c + ' w2', q) / 1000):>12}" for c in ("sluice", "nats-js", "redis-always")))
fsync_p50, fsync_p99 = med("fsync", "p50_us"), med("fsync", "p99_us")
ow_p50, ow_p99 = med("fsync overwrite", "p50_us"), med("fsync overwrite", "p99_us")
ceiling, single = rate("http ceiling"), rate("sluice single")
group_p99 = None
for r in rows:
    if r.get("case") == "sluice group live":
        lat = r.get("latency_ms", {})
        group_p99 = lat.get("p99", group_p99)
push_rate, push_offered, push_p50, push_p99, push_dups = None, None, None, None, None
for r in rows:
    if r.get("case") == "sluice push live":
        push_rate, push_offered = r.get("events_per_sec"), r.get("extra", {}).get("offered_per_sec")
        push_p50, push_p99 = r.get("latency_ms", {}).get("p50"), r.get("latency_ms", {}).get("p99")
        push_dups = r.get("counts", {}).get("duplicates", {}).get("total")
print(f"live push at 10,000 ev/s, batches of 10: {show(push_rate)} delivered/s of {show(push_offered)} offered, "
      f"publish to delivery p50 / p99 {show(push_p50)} / {show(push_p99)} ms, {push_dups} duplicates")
print(f"4 KiB append + fdatasync p50 / p99: {show(fsync_p50 and fsync_p50 / 1000)} / {show(fsync_p99 and fsync_p99 / 1000)} ms")
print(f"4 KiB overwrite + fdatasync p50 / p99: {show(ow_p50 and ow_p50 / 1000)} / {show(ow_p99 and ow_p99 / 1000)} ms")
print(f"HTTP ceiling (wrk, 64 connections): {show(ceiling)} requests/s; Sluice single-event publish: {show(single)} ev/s")

# Issue 48's targets (the ratio is met at 1 for "≤" targets: the bound over the figure).
targets = [
    ("work queue b10 ≥ Redis always", ratio(rate("sluice w4 b10"), rate("redis-always w4 b10")), 1.0),
    ("work queue b10 ≥ ½ JetStream", ratio(rate("sluice w4 b10"), rate("nats-js w4 b10")), 0.5),
    ("work queue b100 ≥ 1.2 × Redis always", ratio(rate("sluice w4 b100"), rate("redis-always w4 b100")), 1.2),
    ("work queue b100 ≥ 1.2 × JetStream", ratio(rate("sluice w4 b100"), rate("nats-js w4 b100")), 1.2),
    ("latency p50 ≤ 1.5 × fdatasync", ratio(fsync_p50 and 1.5 * fsync_p50, med("sluice w2", "p50_us")), 1.0),
    ("latency p99 ≤ 2 × fdatasync", ratio(fsync_p99 and 2 * fsync_p99, med("sluice w2", "p99_us")), 1.0),
    ("latency p50 ≤ 1.5 × overwrite fdatasync", ratio(ow_p50 and 1.5 * ow_p50, med("sluice w2", "p50_us")), 1.0),
    ("latency p99 ≤ 2 × overwrite fdatasync", ratio(ow_p99 and 2 * ow_p99, med("sluice w2", "p99_us")), 1.0),
    ("single publish ≥ ½ HTTP ceiling", ratio(single, ceiling), 0.5),
    ("group publish-to-delivery p99 ≤ 5 ms", ratio(5.0, group_p99), 1.0),
    ("live push keeps up (≥ 0.95 of offered)", ratio(push_rate, push_offered), 0.95),
    ("batched publish ≥ 3 × JetStream", ratio(rate("sluice w1"), rate("nats-js w1")), 3.0),
    ("replay ≥ 4 × JetStream", ratio(rate("sluice w3"), rate("nats-js w3")), 4.0),
    ("peak RSS < 150 MiB", ratio(150.0, rss), 1.0),
]
print(f"\n{'target':<40} {'ratio':>8}  met")
for name, got, need in targets:
    met = "—" if got is None else ("yes" if got >= need else "no")
    print(f"{name:<40} {show(got):>8}  {met}")
print(f"\nSluice peak RSS: {rss} MiB; group live p99: {show(group_p99)} ms")
PY
echo "results: $OUT/results.jsonl"
