#!/usr/bin/env python3
"""Local stand-in for the push dispatcher's triggers in template.yaml, so the functions
run end to end on a laptop and in tests as on AWS:

- its DynamoDB event source mapping: reads the table's stream from moto (GetShardIterator,
  GetRecords), keeps the records its FilterCriteria pass, and invokes the function with a
  DynamoDB Streams event of up to BatchSize records once MaximumBatchingWindowInSeconds has
  passed since the first, retrying a failed invocation MaximumRetryAttempts times;
- its schedule: with --sweep-seconds, a scheduled event that often, and with --watch-stdin
  one for each line `sweep` read from standard input (how a test sweeps when it wants).

Invocations go to a Lambda Invoke API (`cargo lambda watch`'s), one at a time, as the
function's reserved concurrency of one allows on AWS. Each prints one line,
`invoked source=stream|schedule records=N status=S result=<the function's answer>`, for
tests to count. Run with
.venv/bin/python (infra/setup.sh makes it); stops on SIGTERM/SIGINT or, with
--watch-stdin, when its standard input closes.
"""
import argparse
import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

import boto3

from local_aws import template_resources

POLL_SECONDS = 0.1


def stream_event(function):
    """The properties of the DynamoDB event source of `function` in template.yaml."""
    events = template_resources()[function]["Properties"]["Events"]
    return next(e["Properties"] for e in events.values() if e["Type"] == "DynamoDB")


def matches(pattern, value):
    """EventBridge pattern matching, as far as the template's filters use it: nested
    objects, lists of exact values and `prefix`. Anything else is refused rather than
    matched differently from AWS."""
    if isinstance(pattern, dict):
        if not isinstance(value, dict):
            return False
        return all(key in value and matches(sub, value[key]) for key, sub in pattern.items())
    if isinstance(pattern, list):
        for option in pattern:
            if isinstance(option, dict):
                if set(option) != {"prefix"}:
                    raise ValueError(f"filter operator not emulated: {option}")
                if isinstance(value, str) and value.startswith(option["prefix"]):
                    return True
            elif option == value:
                return True
        return False
    raise ValueError(f"filter pattern not emulated: {pattern!r}")


def as_json(record):
    """A record as Lambda receives it (boto3 turned the creation time into a datetime)."""
    change = dict(record["dynamodb"])
    created = change.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        change["ApproximateCreationDateTime"] = created.timestamp()
    return {**record, "dynamodb": change}


class Invoker:
    def __init__(self, base, function):
        self.url = f"{base.rstrip('/')}/2015-03-31/functions/{function}/invocations"
        self.lock = threading.Lock()

    def invoke(self, source, payload, records=0):
        """One invocation at a time; True if the function succeeded."""
        with self.lock:
            request = urllib.request.Request(
                self.url, data=json.dumps(payload).encode(), headers={"content-type": "application/json"}
            )
            answer = b""
            try:
                with urllib.request.urlopen(request, timeout=120) as response:
                    status = response.status
                    failed = response.headers.get("x-amz-function-error") is not None
                    answer = response.read()
            except urllib.error.HTTPError as e:
                status, failed = e.code, True
            except OSError as e:
                status, failed = f"error:{e.__class__.__name__}", True
            result = answer.decode(errors="replace").replace("\n", " ")
            outcome = " failed" if failed else ""
            print(f"invoked source={source} records={records} status={status}{outcome} result={result}", flush=True)
            return not failed


def read_stream(args, mapping, invoker, done):
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name=args.region)
    dynamodb = session.client("dynamodb", endpoint_url=args.endpoint)
    streams = session.client("dynamodbstreams", endpoint_url=args.endpoint)
    arn = dynamodb.describe_table(TableName=args.table)["Table"]["LatestStreamArn"]
    shards = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterators = [
        streams.get_shard_iterator(
            StreamArn=arn, ShardId=s["ShardId"], ShardIteratorType=mapping.get("StartingPosition", "LATEST")
        )["ShardIterator"]
        for s in shards
    ]
    patterns = [json.loads(f["Pattern"]) for f in mapping.get("FilterCriteria", {}).get("Filters", [])]
    batch_size = int(mapping.get("BatchSize", 100))
    window = float(mapping.get("MaximumBatchingWindowInSeconds", 0))
    retries = int(mapping.get("MaximumRetryAttempts", 0))
    print("ready", flush=True)
    pending, first_at = [], None
    while not done.is_set():
        for i, iterator in enumerate(iterators):
            got = streams.get_records(ShardIterator=iterator, Limit=1000)
            iterators[i] = got["NextShardIterator"]
            for record in got["Records"]:
                record = {**as_json(record), "eventSourceARN": arn}
                if not patterns or any(matches(p, record) for p in patterns):
                    pending.append(record)
                    first_at = first_at or time.monotonic()
        while pending and (len(pending) >= batch_size or time.monotonic() - first_at >= window):
            batch, pending = pending[:batch_size], pending[batch_size:]
            for _ in range(1 + retries):
                if invoker.invoke("stream", {"Records": batch}, len(batch)):
                    break
            first_at = time.monotonic() if pending else None
        if not pending:
            # A whole poll found nothing left to invoke: every record written before it began
            # has had its wake (what a test waits for before it calls the stream idle).
            print("stream idle", flush=True)
        time.sleep(POLL_SECONDS)


def sweep(invoker):
    """One scheduled event, as EventBridge sends it."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "version": "0",
        "id": f"sweep-{now}",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": now,
        "region": "us-east-1",
        "resources": [],
        "detail": {},
    }
    invoker.invoke("schedule", event)


def sweep_every(seconds, invoker, done):
    while not done.wait(seconds):
        sweep(invoker)


def sweep_on_request(invoker, done):
    """A sweep per line `sweep` of standard input; its end stops everything."""
    for line in sys.stdin:
        if line.strip() == "sweep":
            sweep(invoker)
    done.set()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True, help="moto's URL (infra/local_aws.py prints it)")
    parser.add_argument("--table", required=True)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--invoke", required=True, help="a Lambda Invoke API, e.g. cargo lambda watch's")
    parser.add_argument("--function", default="sluice-dispatcher", help="the function's name there")
    parser.add_argument("--resource", default="DispatcherFunction", help="its resource in template.yaml")
    parser.add_argument("--sweep-seconds", type=float, default=0, help="0: no schedule")
    parser.add_argument(
        "--watch-stdin", action="store_true", help="sweep on each line `sweep`; stop when standard input closes"
    )
    args = parser.parse_args()

    invoker = Invoker(args.invoke, args.function)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    if args.watch_stdin:
        threading.Thread(target=sweep_on_request, args=(invoker, done), daemon=True).start()
    if args.sweep_seconds > 0:
        threading.Thread(target=sweep_every, args=(args.sweep_seconds, invoker, done), daemon=True).start()
    read_stream(args, stream_event(args.resource), invoker, done)


if __name__ == "__main__":
    main()
