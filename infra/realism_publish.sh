#!/usr/bin/env bash
# Publishes through the functions on moto with DynamoDB's latency and conflict rule
# (infra/moto_realism.py) and prints one JSON line: the shape, throughput, p50/p99 and the
# layer's conflict counters, to set beside the scale model's figure for the same shape
# (`sluice-sim scale --workload publish`). docs/AWS.md, "moto with DynamoDB's latency and
# conflicts", says what the layer models.
#
# Shape: PUBLISHERS (8) closed-loop clients, each sending one unkeyed event per request
# (spread over the partitions in turn), to one topic of PARTITIONS (8), for DURATION (30) s,
# through `cargo lambda watch` of the publish function with CONCURRENCY (8) instances.
# SLUICE_MOTO_LATENCY_SCALE (1) scales the published latencies; CONFLICTS=0 turns the
# conflict rule off (latency only), the baseline to set the conflicts' cost against.
#
# Usage: infra/realism_publish.sh   (run infra/setup.sh first; the first run builds the
# admin and publish functions)
set -euo pipefail
cd "$(dirname "$0")/.."
PUBLISHERS=${PUBLISHERS:-8} PARTITIONS=${PARTITIONS:-8} DURATION=${DURATION:-30} CONCURRENCY=${CONCURRENCY:-8}
export SLUICE_MOTO_LATENCY_SCALE=${SLUICE_MOTO_LATENCY_SCALE:-1}
py=$PWD/.venv/bin/python
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# moto, realistic, tied to a pipe this script holds open.
mkfifo "$work/moto-in"
no_conflicts=()
[ "${CONFLICTS:-1}" = 0 ] && no_conflicts=(--no-conflicts)
setsid "$py" infra/local_aws.py --watch-stdin --realism --latency-scale "$SLUICE_MOTO_LATENCY_SCALE" "${no_conflicts[@]}" \
    <"$work/moto-in" >"$work/moto.out" 2>"$work/moto.err" &
pids+=($!)
exec 3>"$work/moto-in"
until grep -q endpoint= "$work/moto.out" 2>/dev/null; do sleep 0.2; done
endpoint=$(sed -n 's/.*endpoint=\([^ ]*\).*/\1/p' "$work/moto.out")

watch() { # function port concurrency
    setsid .venv/bin/cargo-lambda lambda watch --ignore-changes --quiet -A 127.0.0.1 -P "$2" --concurrency "$3" \
        --timeout 120 --manifest-path "functions/$1/Cargo.toml" \
        --env-var SLUICE_BUCKET=sluice-local,SLUICE_TABLE=sluice-local,SLUICE_AWS_REGION=us-east-1 \
        --env-var "SLUICE_AWS_ENDPOINT_URL=$endpoint,AWS_ACCESS_KEY_ID=test,AWS_SECRET_ACCESS_KEY=test" \
        </dev/null >>"$work/watch.log" 2>&1 &
    pids+=($!)
}
admin_port=$(free_port) publish_port=$(free_port)
PATH="$PWD/.venv/bin:$PATH" watch admin "$admin_port" 1
PATH="$PWD/.venv/bin:$PATH" watch publish "$publish_port" "$CONCURRENCY"

"$py" - "$endpoint" "$admin_port" "$publish_port" "$PUBLISHERS" "$PARTITIONS" "$DURATION" <<'EOF'
import json, sys, threading, time, urllib.error, urllib.request

endpoint, admin, publish, publishers, partitions, seconds = sys.argv[1:]
publishers, partitions, seconds = int(publishers), int(partitions), float(seconds)
admin = f"http://127.0.0.1:{admin}/lambda-url/sluice-admin"
publish = f"http://127.0.0.1:{publish}/lambda-url/sluice-publish"
topic = f"realism-{int(time.time())}"

def call(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=180) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()

deadline = time.time() + 2400  # the first request to each function waits for its build
for url in (admin, publish):
    while True:
        try:
            if call("GET", f"{url}/v1/not-a-route")[0] == 404:
                break
        except OSError:
            pass
        if time.time() > deadline:
            sys.exit(f"{url} never came up")
        time.sleep(1)
status, body = call("PUT", f"{admin}/v1/topics/{topic}", {"partitions": partitions})
assert status in (200, 201), (status, body)
# One warm-up publish per instance, outside the measurement.
for _ in range(publishers):
    call("POST", f"{publish}/v1/topics/{topic}/events", {"events": [{"value": 0}]})

def counters():
    with urllib.request.urlopen(f"{endpoint}/_sluice_realism") as answer:
        return json.load(answer)

latencies, statuses, lock = [], {}, threading.Lock()
before = counters()
start = time.time()
end = start + seconds

def publisher(n):
    i = 0
    while time.time() < end:
        t = time.time()
        status, _ = call("POST", f"{publish}/v1/topics/{topic}/events", {"events": [{"value": {"p": n, "i": i}}]})
        with lock:
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200:
                latencies.append((time.time() - t) * 1000)
        i += 1

threads = [threading.Thread(target=publisher, args=(n,)) for n in range(publishers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.time() - start
after = counters()
grew = lambda k: after.get(k, 0) - before.get(k, 0)
latencies.sort()
pct = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 1) if latencies else None
print(json.dumps({
    "workload": "publish", "partitions": partitions, "clients": publishers, "batch": 1,
    "seconds": round(elapsed, 1), "throughput_per_s": round(len(latencies) / elapsed, 1),
    "p50_ms": pct(0.50), "p99_ms": pct(0.99), "statuses": statuses,
    "transactions": grew("TransactWriteItems"), "conflicts": grew("transaction_conflicts"),
    "single_write_conflicts": grew("single_write_conflicts"),
    "latency_scale": float(__import__("os").environ["SLUICE_MOTO_LATENCY_SCALE"]),
    "conflict_rule": __import__("os").environ.get("CONFLICTS", "1") != "0",
    "hottest_items": after.get("hottest_items", []),
}))
EOF
