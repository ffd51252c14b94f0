#!/usr/bin/env bash
# Server CPU per operation, in instructions: `sluice serve` (release) under valgrind's
# callgrind, which counts the instructions every thread executes, repeatably on a noisy
# machine where wall-clock figures are not. For each operation the counters are zeroed,
# N requests are sent one after another over one keep-alive connection, and the total is
# dumped: instructions per request and per message. Start-up, set-up (creating the topic,
# publishing the backlog) and the time between phases are not counted.
#
# Operations (1 KiB values, a topic of 8 partitions):
#   publish   one event per request                      (N requests)
#   publish100  100 events per request                   (N requests)
#   receive   10 messages of a work queue per request    (N requests)
#   ack       10 receipts per request                    (N requests)
#   read      a replay read of up to 1,000 events from one partition (offsets and
#             partitions taken in turn over the backlog; per event read) (N requests)
#   poll      a consumer group member's poll of 100 events, then its commit, as its loop
#             does: counted per poll + commit pair        (N pairs)
#   cycle     a worker's loop on a second subscription: a receive of 10 carrying the
#             previous batch's acks (`"ack"`), so one lease is in flight, not N as
#             in `receive`                                (N requests)
#
# Usage: infra/callgrind.sh [N] (default 200); SLUICE_BIN=path measures that server binary;
# KEEP=dir keeps each phase's profile there (callgrind_annotate dir/receive.out).
# Needs valgrind (Debian: valgrind). About two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
source infra/callgrind_serve.sh "$@"

python3 - "$port" "$n" "$server" "$work" <<'PY'
import http.client, json, subprocess, sys, glob, os

port, n, pid, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
value = "x" * 1024

def call(method, path, body=None):
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"content-type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status >= 300:
        raise SystemExit(f"{method} {path}: {r.status} {data[:200]!r}")
    return json.loads(data) if data else None

def ctl(*args):
    subprocess.run(["callgrind_control", *args, pid], check=True, capture_output=True)

def measure(name, per_request_messages, action):
    ctl("--zero")
    ctl("--instr=on")
    counted = 0
    for i in range(n):
        got = action(i)
        counted += got if isinstance(got, int) else 0
    ctl("--instr=off")
    before = set(glob.glob(f"{work}/cg.{pid}.*"))
    ctl(f"--dump={name}")
    dumps = sorted(set(glob.glob(f"{work}/cg.{pid}.*")) - before, key=os.path.getmtime)
    # A dump made by callgrind_control ends with the phase's count ("totals:").
    total = max(int(line.split()[1]) for line in open(dumps[-1]) if line.startswith(("totals:", "summary:")))
    if os.environ.get("KEEP"):
        os.makedirs(os.environ["KEEP"], exist_ok=True)
        os.replace(dumps[-1], os.path.join(os.environ["KEEP"], f"{name}.out"))
    per = total / n
    # An action answering how many messages it got (a read) is counted by those.
    per_request_messages = counted / n if counted else per_request_messages
    per_msg = f"{per / per_request_messages:>12,.0f}" if per_request_messages > 1 else f"{'':>12}"
    print(f"{name:<12} {n:>6} {per:>16,.0f} {per_msg}", flush=True)

call("PUT", "/v1/topics/cg", {"partitions": 8})
call("PUT", "/v1/topics/cg-backlog", {"partitions": 8})
backlog = 10 * n + 100 * n
for _ in range(backlog // 100 + 1):
    call("POST", "/v1/topics/cg-backlog/events",
         {"events": [{"key": f"k{i}", "value": value} for i in range(100)]})
call("PUT", "/v1/topics/cg-backlog/subscriptions/work", {"start": "earliest", "visibility_timeout_ms": 600000})
call("PUT", "/v1/topics/cg-backlog/subscriptions/loop", {"start": "earliest", "visibility_timeout_ms": 600000})
received = []
held = []

def cycle(_):
    got = call("POST", "/v1/topics/cg-backlog/subscriptions/loop/receive", {"max_messages": 10, "ack": held})
    assert len(got["messages"]) == 10, f"a receive got {len(got['messages'])} messages"
    held[:] = [m["receipt"] for m in got["messages"]]

def receive(_):
    got = call("POST", "/v1/topics/cg-backlog/subscriptions/work/receive", {"max_messages": 10})["messages"]
    assert len(got) == 10, f"a receive got {len(got)} messages"
    received.append([m["receipt"] for m in got])

def ack(i):
    acks = call("POST", "/v1/topics/cg-backlog/subscriptions/work/ack", {"receipts": received[i]})
    assert acks is not None

member = {}

def join():
    # Joined just before its phase, with the longest session the API allows, so the phases
    # before it (slow under valgrind on a loaded machine) cannot expire the member.
    member.update(call("POST", "/v1/groups/cg/poll", {"topics": ["cg-backlog"], "max_events": 1,
                                                      "wait_ms": 0, "session_timeout_ms": 300000}))

def poll(_):
    mid = member["member_id"]
    got = call("POST", "/v1/groups/cg/poll",
               {"member_id": mid, "topics": ["cg-backlog"], "max_events": 100, "wait_ms": 0})
    events = got["events"]
    assert events, "a poll got no events"
    last = {}
    for e in events:
        last[e["partition"]] = e["offset"] + 1
    call("POST", "/v1/groups/cg/commit", {"member_id": mid, "generation": got["generation"],
         "offsets": [{"topic": "cg-backlog", "partition": p, "offset": o} for p, o in last.items()]})

print(f"{'operation':<12} {'count':>6} {'instr/request':>16} {'instr/message':>12}")
measure("publish", 1, lambda i: call("POST", "/v1/topics/cg/events", {"events": [{"key": f"k{i}", "value": value}]}))
measure("publish100", 100, lambda i: call("POST", "/v1/topics/cg/events",
        {"events": [{"key": f"k{i}-{j}", "value": value} for j in range(100)]}))

# The backlog of every partition holding at least a page (1,000 events, or as much as the
# fullest holds when N is small: its 100 keys fall unevenly), read a page at a time from
# offsets taken in turn.
heads = [q["high_watermark"] for q in call("GET", "/v1/topics/cg-backlog")["partition_states"]]
page = min(1000, max(heads))
full = [(p, h) for p, h in enumerate(heads) if h >= page]

def read(i):
    p, head = full[i % len(full)]
    start = (i // len(full)) * page % (head - page + 1)
    got = call("GET", f"/v1/topics/cg-backlog/partitions/{p}/events?offset={start}&limit={page}")
    assert got["events"], "a read got no events"
    return len(got["events"])

measure("read", 1000, read)
measure("receive", 10, receive)
measure("ack", 10, ack)
join()
measure("poll", 100, poll)
measure("cycle", 10, cycle)
PY
