#!/usr/bin/env bash
# Server CPU per push delivery, in instructions (infra/callgrind.sh's method, for the
# embedded dispatcher): a release `sluice serve` under callgrind, a backlog of 10 x N
# 1 KiB events on 8 partitions, then a push subscription (batches of 10, 4 in flight) to
# a local Python receiver answering 204. Counted from the subscription's creation until
# every message arrived and describe shows nothing in flight: instructions per delivery
# and per message, and fsyncs per delivery (`sluice_fsync_seconds`'s count).
#
# Usage: infra/callgrind_push.sh [N] (default 200); SLUICE_BIN=path measures that server
# binary; KEEP=dir keeps the profile (callgrind_annotate dir/push.out). Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
source infra/callgrind_serve.sh "$@"
python3 - "$port" "$n" "$server" "$work" <<'PY'
import http.client, http.server, json, subprocess, sys, glob, os, threading, time
port, n, pid, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
got = {"msgs": set(), "deliveries": 0, "dups": 0}
lock = threading.Lock()
class Hook(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with lock:
            got["deliveries"] += 1
            for m in body["messages"]:
                if m["id"] in got["msgs"]: got["dups"] += 1
                got["msgs"].add(m["id"])
        self.send_response(204); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
hs = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=hs.serve_forever, daemon=True).start()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
def call(method, path, body=None):
    conn.request(method, path, body=None if body is None else json.dumps(body), headers={"content-type": "application/json"})
    r = conn.getresponse(); data = r.read()
    if r.status >= 300: raise SystemExit(f"{method} {path}: {r.status} {data[:200]!r}")
    return json.loads(data) if data else None
def ctl(*args): subprocess.run(["callgrind_control", *args, pid], check=True, capture_output=True)
call("PUT", "/v1/topics/cgp", {"partitions": 8})
total_msgs = 10 * n
for b in range(total_msgs // 100):
    call("POST", "/v1/topics/cgp/events", {"events": [{"key": f"k{i}", "value": "x" * 1024} for i in range(100)]})
def fsyncs():
    conn.request("GET", "/metrics"); r = conn.getresponse(); text = r.read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("sluice_fsync_seconds_count"))
f0 = fsyncs()
ctl("--zero"); ctl("--instr=on")
t0 = time.time()
call("PUT", "/v1/topics/cgp/subscriptions/hook", {"start": "earliest",
     "push": {"url": f"http://127.0.0.1:{hs.server_address[1]}/hook", "max_batch": 10, "max_in_flight": 4}})
while True:
    with lock: k = len(got["msgs"])
    if k >= total_msgs:
        d = call("GET", "/v1/topics/cgp/subscriptions/hook")
        if d["backlog"]["in_flight"] == 0 and d["backlog"]["visible"] == 0: break
    time.sleep(0.2)
wall = time.time() - t0
f1 = fsyncs()
ctl("--instr=off")
before = set(glob.glob(f"{work}/cg.{pid}.*"))
ctl("--dump=push")
dumps = sorted(set(glob.glob(f"{work}/cg.{pid}.*")) - before, key=os.path.getmtime)
total = max(int(l.split()[1]) for l in open(dumps[-1]) if l.startswith(("totals:", "summary:")))
if os.environ.get("KEEP"):
    os.makedirs(os.environ["KEEP"], exist_ok=True); os.replace(dumps[-1], os.path.join(os.environ["KEEP"], "push.out"))
print(f"deliveries {got['deliveries']} messages {len(got['msgs'])} dups {got['dups']} "
      f"instr {total:,} per delivery {total/got['deliveries']:,.0f} per message {total/len(got['msgs']):,.0f} fsyncs per delivery {(f1-f0)/got['deliveries']:.2f} (wall {wall:.0f} s under valgrind)")
PY
