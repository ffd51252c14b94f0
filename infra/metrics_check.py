#!/usr/bin/env python3
"""`GET /metrics` against the describes, after a scripted workload.

Starts `sluice serve` (target/debug/sluice) on a free loopback port over a fresh data
directory, with the janitor every 200 ms; publishes, replays, consumes in a group, and
receives, acks, nacks, dead-letters and redrives in a work queue; then scrapes
`/metrics`, parses it with prometheus_client's text parser (a real Prometheus parser,
not ours) and checks that every figure agrees with what the workload did and with the
describes of the topic, the group and the subscription. Exits 1 on the first
disagreement, printing the scrape.

Usage: infra/metrics_check.py [path/to/sluice]
"""

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


class Server:
    """`sluice serve` on 127.0.0.1:0, stopped on exit."""

    def __init__(self, binary, data_dir):
        env = dict(os.environ, RUST_LOG="warn", SLUICE_JANITOR_INTERVAL_MS="200")
        self.proc = subprocess.Popen(
            [binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", data_dir],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.stop()
            sys.exit(f"sluice serve did not start: {line!r}")
        self.base = line.removeprefix("listening on ").strip()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def call(self, method, path, body=None, expect=(200, 201, 204)):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        if status not in expect:
            sys.exit(f"{method} {path}: {status} {raw[:300]!r}")
        text = raw.decode()
        return json.loads(text) if text.startswith(("{", "[")) else text


def scrape(server):
    """Every sample of `/metrics` by (name, sorted labels)."""
    text = server.call("GET", "/metrics")
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples


def workload(server):
    """What the scripted clients did, for the checks."""
    did = {"published": 0, "received": 0, "acked": 0, "nacked": 0}
    server.call("PUT", "/v1/topics/orders", {"partitions": 3})
    server.call("PUT", "/v1/topics/orders/subscriptions/jobs",
                {"start": "earliest", "max_receive_count": 1, "visibility_timeout_ms": 60000,
                 "rate": {"per_second": 10000, "burst": 10000}})
    for batch in range(3):
        events = [{"key": f"k{batch}-{i}", "value": {"n": i}} for i in range(10)]
        server.call("POST", "/v1/topics/orders/events", {"events": events})
        did["published"] += len(events)
    server.call("POST", "/v1/topics/orders/events", {"events": []}, expect=(400,))
    server.call("POST", "/v1/topics/nowhere/events", {"events": [{"value": 1}]}, expect=(404,))
    # Refused before the log looks the topic up: still no label set for a made-up name.
    server.call("POST", "/v1/topics/madeup/events", {"events": []}, expect=(400,))
    server.call("BREW", "/v1/topics", expect=(405,))
    did["replayed"] = len(server.call("GET", "/v1/topics/orders/partitions/0/events?offset=earliest")["events"])

    # A group reads everything, then commits partition 0 only.
    member, polled, generation = None, 0, None
    while polled < did["published"]:
        body = {"topics": ["orders"], "max_events": 100}
        if member:
            body["member_id"] = member
        answer = server.call("POST", "/v1/groups/billing/poll", body)
        member, generation = answer["member_id"], answer["generation"]
        polled += len(answer["events"])
    did["group_read"] = polled
    top = max(e["offset"] for e in server.call(
        "GET", "/v1/topics/orders/partitions/0/events?offset=earliest")["events"])
    server.call("POST", "/v1/groups/billing/commit", {
        "member_id": member, "generation": generation,
        "offsets": [{"topic": "orders", "partition": 0, "offset": top + 1}]})

    # The queue: 10 received; 5 acked, 5 nacked, which die on the next receive; 2 redriven.
    got = server.call("POST", "/v1/topics/orders/subscriptions/jobs/receive", {"max_messages": 10})["messages"]
    did["received"] += len(got)
    receipts = [m["receipt"] for m in got]
    server.call("POST", "/v1/topics/orders/subscriptions/jobs/ack", {"receipts": receipts[:5]})
    server.call("POST", "/v1/topics/orders/subscriptions/jobs/nack", {"receipts": receipts[5:]})
    did["acked"], did["nacked"] = 5, len(receipts) - 5
    more = server.call("POST", "/v1/topics/orders/subscriptions/jobs/receive", {"max_messages": 3})["messages"]
    did["received"] += len(more)
    did["redriven"] = server.call("POST", "/v1/topics/orders/subscriptions/jobs/dlq/redrive",
                                  {"max_messages": 2})["redriven"]
    # Paused last: its gauge says so, and the counts above stand.
    server.call("POST", "/v1/topics/orders/subscriptions/jobs/pause")
    return did


class Throttling(http.server.BaseHTTPRequestHandler):
    """A push target that answers every delivery 429 with `Retry-After: 60`."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(429)
        self.send_header("retry-after", "60")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def suspended_push(server):
    """A push subscription (topic `hooks`) whose target answers 429, suspended after one
    failure (`push.suspend_after`): waits (bounded) until describe says so."""
    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Throttling)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    server.call("PUT", "/v1/topics/hooks", {"partitions": 1})
    server.call("PUT", "/v1/topics/hooks/subscriptions/hook", {"start": "earliest", "push": {
        "url": f"http://127.0.0.1:{target.server_address[1]}/", "suspend_after": {"failures": 1, "spanning_ms": 0}}})
    server.call("POST", "/v1/topics/hooks/events", {"events": [{"value": 1}]})
    deadline = time.monotonic() + 20
    while server.call("GET", "/v1/topics/hooks/subscriptions/hook")["state"] != "suspended":
        if time.monotonic() > deadline:
            sys.exit("the push subscription was not suspended within 20 s")
        time.sleep(0.2)


def check(samples, name, labels, expected):
    got = samples.get((name, tuple(sorted(labels.items()))))
    if got != expected:
        raise AssertionError(f"{name}{labels}: /metrics says {got}, expected {expected}")


def checks(server, samples, did):
    topic = {"topic": "orders"}
    check(samples, "sluice_events_published_total", topic, did["published"])
    check(samples, "sluice_publish_requests_total", {**topic, "outcome": "ok"}, 3)
    check(samples, "sluice_publish_requests_total", {**topic, "outcome": "rejected"}, 1)
    check(samples, "sluice_publish_commit_seconds_count", topic, 3)
    made_up = [k for k in samples if any(v in ("nowhere", "madeup") for _, v in k[1])]
    assert not made_up, f"label sets for topics that do not exist: {made_up}"
    check(samples, "sluice_http_requests_total", {"route": "/v1/topics", "method": "other", "status": "405"}, 1)
    # Three publishes to orders, one to hooks (`suspended_push`).
    check(samples, "sluice_http_requests_total",
          {"route": "/v1/topics/{topic}/events", "method": "POST", "status": "200"}, 4)
    check(samples, "sluice_http_requests_total",
          {"route": "/v1/topics/{topic}/events", "method": "POST", "status": "404"}, 1)
    check(samples, "sluice_events_read_total", {**topic, "via": "replay"}, 2 * did["replayed"])
    check(samples, "sluice_events_read_total", {**topic, "via": "group"}, did["group_read"])
    check(samples, "sluice_events_read_total", {**topic, "via": "queue"}, did["received"])
    for file in ("segment", "state"):
        if samples.get(("sluice_fsync_seconds_count", (("file", file),)), 0) < 1:
            raise AssertionError(f"no fsync of a {file} file counted")

    described = server.call("GET", "/v1/topics/orders")
    total_bytes = 0
    for p in described["partition_states"]:
        labels = {**topic, "partition": str(p["partition"])}
        check(samples, "sluice_partition_high_watermark", labels, p["high_watermark"])
        check(samples, "sluice_partition_log_start_offset", labels, p["log_start_offset"])
        total_bytes += p["bytes"]
    check(samples, "sluice_topic_bytes", topic, total_bytes)

    group = server.call("GET", "/v1/groups/billing")
    check(samples, "sluice_group_members", {"group": "billing"}, len(group["members"]))
    check(samples, "sluice_group_generation", {"group": "billing"}, group["generation"])
    for p in group["partitions"]:
        labels = {"group": "billing", "topic": p["topic"], "partition": str(p["partition"])}
        check(samples, "sluice_group_lag", labels, p["lag"])
        if p["committed_offset"] is not None:
            check(samples, "sluice_group_committed_offset", labels, p["committed_offset"])
    assert sum(p["lag"] for p in group["partitions"]) > 0, "partitions 1 and 2 are not committed"

    sub = server.call("GET", "/v1/topics/orders/subscriptions/jobs")
    labels = {**topic, "subscription": "jobs"}
    for state in ("visible", "in_flight", "delayed", "scheduled", "dead"):
        check(samples, "sluice_subscription_messages", {**labels, "state": state}, sub["backlog"][state])
    check(samples, "sluice_subscription_filtered", labels, sub["backlog"]["filtered"])
    check(samples, "sluice_subscription_expired", labels, sub["backlog"]["expired"])
    assert sub["state"] == "paused", sub["state"]
    check(samples, "sluice_subscription_paused", labels, 1)
    # A rate never reached: the store's running total of its waits, 0.
    assert sub["throttled_ms"] == 0, sub
    check(samples, "sluice_subscription_throttled_seconds", labels, 0)
    check(samples, "sluice_messages_received_total", labels, did["received"])
    check(samples, "sluice_messages_acked_total", labels, did["acked"])
    check(samples, "sluice_messages_nacked_total", labels, did["nacked"])
    check(samples, "sluice_messages_dead_lettered_total", labels, did["nacked"])
    check(samples, "sluice_messages_redriven_total", labels, did["redriven"])
    assert did["redriven"] == 2 and sub["backlog"]["dead"] == did["nacked"] - 2, sub["backlog"]

    hook = server.call("GET", "/v1/topics/hooks/subscriptions/hook")
    labels = {"topic": "hooks", "subscription": "hook"}
    assert hook["state"] == "suspended" and hook["delivery"]["in_flight_limit"] == 1, hook
    check(samples, "sluice_subscription_suspended", labels, 1)
    check(samples, "sluice_subscription_paused", labels, 0)
    check(samples, "sluice_push_in_flight_limit", labels, 1)
    check(samples, "sluice_push_suspensions_total", labels, 1)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/debug/sluice"
    with tempfile.TemporaryDirectory() as data:
        server = Server(binary, data)
        try:
            did = workload(server)
            suspended_push(server)
            # The janitor runs every 200 ms: wait (bounded) for one counted run.
            deadline = time.monotonic() + 20
            while True:
                text, samples = scrape(server)
                if samples.get(("sluice_janitor_runs_total", (("outcome", "ok"),)), 0) >= 1:
                    break
                if time.monotonic() > deadline:
                    sys.exit("no janitor run was counted within 20 s")
                time.sleep(0.2)
            try:
                checks(server, samples, did)
            except AssertionError as e:
                print("\n".join(l for l in text.splitlines() if "_bucket{" not in l), file=sys.stderr)
                sys.exit(f"metrics check failed: {e}")
            families = {f.name for f in text_string_to_metric_families(text)}
            print(f"metrics check: {len(samples)} samples of {len(families)} families agree with the describes")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
