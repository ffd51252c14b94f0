"""DynamoDB's and S3's latency and DynamoDB's transaction conflict rule, around moto's server.

moto answers at once and, behind infra/local_aws.py's lock, one request at a time, so no
two requests ever overlap and no transaction ever conflicts. This layer, off by default,
wraps that locked application:

- Latency: every DynamoDB and S3 request waits for a time drawn from a log-normal fitted to
  published figures (LATENCY_MS below; docs/AWS.md, "moto with DynamoDB's latency and
  conflicts"), times SLUICE_MOTO_LATENCY_SCALE. The wait is outside moto's lock, a
  random part of it before the request is applied and the rest after, so requests overlap
  as they do on AWS and a reader sees a write both before and after its writer has its answer.
- Conflicts, as DynamoDB documents them ("Transaction conflict handling"): a
  TransactWriteItems holds every item it names (ConditionCheck included, the conservative
  reading) from its arrival until its answer leaves. Another TransactWriteItems naming a held
  item is cancelled at once (TransactionCanceledException, one CancellationReason per item in
  request order: `{"Code": "None"}`, or TransactionConflict on the held ones) and holds
  nothing. A PutItem, UpdateItem or DeleteItem applied while its item is held answers
  TransactionConflictException and changes nothing. A TransactGetItems naming an item that a
  write (transactional or not) is applying is cancelled the same way. A refused request still
  takes its latency before its answer.
- A side endpoint, GET /_sluice_realism on the same port, answers the counters as JSON
  (requests by operation, conflicts by kind, the five items most often in conflict), so a
  test can prove the rule fired.

Not modelled: throttling, BatchWriteItem meeting a transaction (documented only for
TransactGetItems), and a transaction that conflicts holding items before it is cancelled.
"""
import json
import math
import os
import random
import threading
import time
import uuid
from collections import Counter
from io import BytesIO

STATS_PATH = "/_sluice_realism"
DYNAMODB_TARGET = "DynamoDB_20120810."
JSON_TYPE = "application/x-amz-json-1.0"
ERROR_PREFIX = "com.amazonaws.dynamodb.v20120810#"
CONFLICT_MESSAGE = "Transaction is ongoing for the item"

# Latency per operation, ms: (p50, p99) of a log-normal. DynamoDB: DeBrie's Lambda client
# measurements (PutItem 7.55/16.2; TransactWriteItems of 5 items 25.3/92.5); reads are
# taken as PutItem (AWS: GetItem and PutItem both average single-digit ms). S3: "median
# latencies are often in the tens of milliseconds" for requests under 512 KB, "roughly
# 100-200 ms" consistently: 30 ms median, 150 ms p99.
LATENCY_MS = {
    "PutItem": (7.55, 16.2),
    "UpdateItem": (7.55, 16.2),
    "DeleteItem": (7.55, 16.2),
    "GetItem": (7.55, 16.2),
    "Query": (7.55, 16.2),
    "Scan": (7.55, 16.2),
    "BatchWriteItem": (7.55, 16.2),
    "BatchGetItem": (7.55, 16.2),
    "TransactWriteItems": (25.3, 92.5),
    "TransactGetItems": (25.3, 92.5),
    "s3": (30.0, 150.0),
}
SINGLE_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}
Z99 = 2.3263  # the standard normal's 99th percentile


def enabled():
    return os.environ.get("SLUICE_MOTO_REALISM", "") not in {"", "0"}


class Realism:
    """The in-flight items, the counters and the latency draws of one server."""

    def __init__(self, key_attributes, scale, seed=None):
        self.key_attributes = key_attributes  # table name -> its key's attribute names
        self.scale = scale
        self.random = random.Random(seed)
        self.lock = threading.Lock()  # the registry below; taken before moto's, never after
        self.held = Counter()  # item -> transactions holding it (at most one)
        self.writing = Counter()  # item -> writes (of any kind) under way
        self.counts = Counter()
        self.hot = Counter()  # item -> times it was the conflicting one

    def latency_s(self, operation):
        p50, p99 = LATENCY_MS.get(operation, LATENCY_MS["GetItem"])
        sigma = math.log(p99 / p50) / Z99
        with self.lock:
            draw = self.random.lognormvariate(math.log(p50), sigma)
            before = self.random.random()
        total = draw * self.scale / 1000.0
        return total * before, total * (1.0 - before)

    def item(self, table, attributes):
        names = self.key_attributes.get(table) or sorted(attributes)
        key = {name: attributes.get(name) for name in names}
        return table, json.dumps(key, sort_keys=True)

    def items(self, operation, body):
        """The items a request names, in request order."""
        if operation in SINGLE_WRITES:
            return [self.item(body["TableName"], body.get("Key") or body.get("Item") or {})]
        if operation in {"TransactWriteItems", "TransactGetItems"}:
            named = []
            for entry in body.get("TransactItems", []):
                kind, op = next(iter(entry.items()))
                named.append(self.item(op["TableName"], op["Item"] if kind == "Put" else op["Key"]))
            return named
        return []

    def stats(self):
        with self.lock:
            hottest = [{"table": t, "key": json.loads(k), "conflicts": n} for (t, k), n in self.hot.most_common(5)]
            return {**self.counts, "hottest_items": hottest}


def cancelled(items, conflicting):
    reasons = [
        {"Code": "TransactionConflict", "Message": CONFLICT_MESSAGE} if i in conflicting else {"Code": "None"}
        for i in range(len(items))
    ]
    codes = ", ".join(r["Code"] for r in reasons)
    return {
        "__type": ERROR_PREFIX + "TransactionCanceledException",
        "CancellationReasons": reasons,
        "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
    }


def answer(start_response, status, document):
    body = json.dumps(document).encode()
    start_response(
        status,
        [("Content-Type", JSON_TYPE), ("Content-Length", str(len(body))), ("x-amzn-RequestId", str(uuid.uuid4()))],
    )
    return [body]


def install(application_class, key_attributes, scale, seed=None, conflicts=True):
    """Wraps `application_class.__call__` (already serialized by moto's lock) with the layer;
    with `conflicts` off, latency only (a baseline to set conflicts' cost against)."""
    realism = Realism(key_attributes, scale, seed)
    call = application_class.__call__

    def through_moto(app, environ):
        captured = []
        body = b"".join(call(app, environ, lambda *a, **k: captured.append((a, k))))
        return captured[0], body

    def realistic(app, environ, start_response):
        if environ.get("PATH_INFO") == STATS_PATH:
            return answer(start_response, "200 OK", realism.stats())
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.startswith(DYNAMODB_TARGET):
            operation = target[len(DYNAMODB_TARGET):]
        elif target:
            return call(app, environ, start_response)  # DynamoDB Streams and the like: as moto is
        else:
            operation = "s3"
        body = {}
        if operation != "s3":
            raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = BytesIO(raw)
            body = json.loads(raw or b"{}")
        items = realism.items(operation, body)
        before, after = realism.latency_s(operation)
        taken = {"held": [], "writing": []}
        try:
            refusal = arrive(operation, items, taken)
            time.sleep(before)
            if refusal is None:
                refusal, applied = apply(operation, items, app, environ)
            time.sleep(after)
        finally:
            with realism.lock:  # the answer leaves: the items are no longer in flight
                realism.held.subtract(taken["held"])
                realism.writing.subtract(taken["writing"])
                realism.held += Counter()
                realism.writing += Counter()
        if refusal is not None:
            return answer(start_response, "400 Bad Request", refusal)
        (args, kwargs), body = applied
        start_response(*args, **kwargs)
        return [body]

    def arrive(operation, items, taken):
        """Counts the request and takes its items; the refusal of a conflicting transaction, or None."""
        with realism.lock:
            realism.counts[operation] += 1
            if not conflicts:
                return None
            if operation == "TransactWriteItems":
                conflicting = {i for i, item in enumerate(items) if realism.held[item]}
                if conflicting:
                    realism.counts["transaction_conflicts"] += 1
                    realism.counts["conflicting_items"] += len(conflicting)
                    realism.hot.update(items[i] for i in conflicting)
                    return cancelled(items, conflicting)
                realism.held.update(items)
                realism.writing.update(items)
                taken["held"], taken["writing"] = items, items
            elif operation == "TransactGetItems":
                conflicting = {i for i, item in enumerate(items) if realism.writing[item]}
                if conflicting:
                    realism.counts["transact_get_conflicts"] += 1
                    return cancelled(items, conflicting)
            elif operation in SINGLE_WRITES:
                realism.writing.update(items)
                taken["writing"] = items
        return None

    def apply(operation, items, app, environ):
        """Applies the request through moto: (None, (start_response's arguments, body)), or (refusal, None)."""
        if operation not in SINGLE_WRITES:
            return None, through_moto(app, environ)
        # Checked and applied in one step: no transaction takes the item in between.
        with realism.lock:
            if any(realism.held[item] for item in items):
                realism.counts["single_write_conflicts"] += 1
                refusal = {"__type": ERROR_PREFIX + "TransactionConflictException", "message": CONFLICT_MESSAGE}
                return refusal, None
            return None, through_moto(app, environ)

    application_class.__call__ = realistic
    return realism
