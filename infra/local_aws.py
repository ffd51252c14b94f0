#!/usr/bin/env python3
"""Local AWS for tests and `cargo lambda watch`: moto's server (S3, DynamoDB and its stream)
on a free loopback port, with the bucket and table created from the resource
definitions in template.yaml, so the emulated table is the deployed one.

Prints `endpoint=http://127.0.0.1:PORT bucket=NAME table=NAME` on one line once
ready, then serves until SIGTERM/SIGINT or, with --watch-stdin, until its
standard input closes (how tests tie it to their own lifetime). Run with .venv/bin/python (infra/setup.sh makes it).

With --realism (or SLUICE_MOTO_REALISM=1), infra/moto_realism.py adds DynamoDB's and S3's
latency outside the lock, scaled by --latency-scale (or SLUICE_MOTO_LATENCY_SCALE, default
1), and DynamoDB's transaction conflict rule; its counters answer GET /_sluice_realism, and
are printed to standard error when the server stops.
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path

import boto3
import yaml
from moto.moto_server import werkzeug_app
from moto.server import ThreadedMotoServer

ROOT = Path(__file__).resolve().parent.parent
sys.dont_write_bytecode = True  # importing the sibling below leaves no infra/__pycache__
sys.path.insert(0, str(ROOT / "infra"))
import moto_realism  # noqa: E402


class _CfnLoader(yaml.SafeLoader):
    """YAML loader that keeps CloudFormation's short-form tags (!Ref, !Sub, …) as plain values."""


_CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def template_resources():
    with open(ROOT / "template.yaml") as f:
        return yaml.load(f, Loader=_CfnLoader)["Resources"]


def table_definition(name):
    """CreateTable arguments from the template's IndexTable (keys, billing, stream, TTL)."""
    props = template_resources()["IndexTable"]["Properties"]
    create = {
        "TableName": name,
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props["BillingMode"],
    }
    if "StreamSpecification" in props:
        # The stream that wakes the push dispatcher (infra/stream_trigger.py reads it).
        view = props["StreamSpecification"]["StreamViewType"]
        create["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": view}
    return create, props["TimeToLiveSpecification"]


def serialize_requests():
    """Serves one request at a time, as DynamoDB applies each one atomically.

    moto's threaded server runs requests on concurrent threads, and its backends
    are not thread-safe: a conditional update that another request interleaves
    with loses acknowledged writes, and a read can see an item half updated.
    Every request passes through the dispatcher application's __call__, which
    runs the request to its in-memory response, so one lock around it suffices.
    """
    call = werkzeug_app.DomainDispatcherApplication.__call__
    lock = threading.Lock()

    def serialized(self, environ, start_response):
        with lock:
            return call(self, environ, start_response)

    werkzeug_app.DomainDispatcherApplication.__call__ = serialized


def cheap_transactions():
    """Makes moto's TransactWriteItems cost what the transaction touches, not the table.

    moto backs up the whole table (a deep copy, once per item of the transaction)
    before applying a transaction, so it can roll back if a condition fails: a
    100-item transaction on a table of 10,000 items takes seconds. With requests
    served one at a time (serialize_requests), checking every condition first and
    applying only when all hold gives the same all-or-nothing result, so the
    backup is skipped: conditions are evaluated against the table as it is, and a
    failing transaction is cancelled before anything is applied.
    """
    import copy

    import moto.dynamodb.models as models
    from moto.dynamodb.exceptions import TransactionCanceledException

    original = models.DynamoDBBackend.transact_write_items

    class NoBackup:
        @staticmethod
        def deepcopy(table):
            return table

    def transact_write_items(self, transact_items):
        reasons, failed, seen = [], False, set()
        for item in transact_items:
            op_type, op = next(iter(item.items()))
            table = self.get_table(op["TableName"])
            if op_type == "Put":
                key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = op["Item"][table.range_key_attr]
            else:
                key = op["Key"]
            identity = (op["TableName"], str(sorted(key.items())))
            if identity in seen or op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                return original(self, transact_items)  # moto reports the malformed request
            seen.add(identity)
            condition = op.get("ConditionExpression")
            if condition is not None:
                holds = models.get_filter_expression(
                    condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
                ).expr(self.get_item(op["TableName"], key))
                if not holds:
                    reasons.append(("ConditionalCheckFailed", "The conditional request failed", None))
                    failed = True
                    continue
            reasons.append((None, None, None))
        if failed:
            raise TransactionCanceledException(reasons)
        models.copy = NoBackup
        try:
            return original(self, transact_items)
        finally:
            models.copy = copy

    models.DynamoDBBackend.transact_write_items = transact_write_items


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--bucket", default="sluice-local")
    parser.add_argument("--table", default="sluice-local")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--watch-stdin", action="store_true", help="stop when standard input closes")
    parser.add_argument("--realism", action="store_true", default=moto_realism.enabled(),
                        help="add latency and DynamoDB's conflict rule (infra/moto_realism.py)")
    parser.add_argument("--latency-scale", type=float,
                        default=float(os.environ.get("SLUICE_MOTO_LATENCY_SCALE") or 1.0),
                        help="times the published latencies (with --realism)")
    parser.add_argument("--seed", type=int, default=None, help="of the latency draws (with --realism)")
    parser.add_argument("--no-conflicts", action="store_true", help="latency only (with --realism): a baseline")
    args = parser.parse_args()

    serialize_requests()
    cheap_transactions()
    realism = None
    if args.realism:
        keys = [k["AttributeName"] for k in table_definition(args.table)[0]["KeySchema"]]
        realism = moto_realism.install(
            werkzeug_app.DomainDispatcherApplication, {args.table: keys}, args.latency_scale, args.seed,
            conflicts=not args.no_conflicts,
        )
    port = args.port or free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    session = boto3.session.Session(
        aws_access_key_id="test", aws_secret_access_key="test", region_name=args.region
    )
    s3 = session.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket=args.bucket)
    dynamodb = session.client("dynamodb", endpoint_url=endpoint)
    create, ttl = table_definition(args.table)
    dynamodb.create_table(**create)
    dynamodb.update_time_to_live(
        TableName=args.table,
        TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": ttl["Enabled"]},
    )
    print(f"endpoint={endpoint} bucket={args.bucket} table={args.table}", flush=True)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    if args.watch_stdin:
        threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()
    server.stop()
    if realism is not None:
        print(f"moto realism: {json.dumps(realism.stats(), sort_keys=True)}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
