#!/usr/bin/env python3
"""Checks template.yaml keeps the promises docs/AWS.md makes of it that cfn-lint cannot see:

- a table restored to any time in its PITR window finds every object it references: the
  bucket is versioned and keeps a deleted object's version as long as the window;
- the table uses the AWS-owned key unless KmsKeyArn is given;
- a stream wake cannot block its shard: old wakes are dropped, failed batches not bisected;
- the long-poll routes have routes, and throttles, of their own, and every route a
  throttle names exists;
- the dispatcher's reserved concurrency can be left off (a new account deploys).

Run by .ci/run next to cfn-lint; exits 1 naming each broken promise.
"""
import sys
from pathlib import Path

from cfnlint.decode import cfn_yaml

ROOT = Path(__file__).resolve().parent.parent
LONG_POLLS = {
    "POST /v1/groups/{group}/poll": "GroupsFunction",
    "POST /v1/topics/{topic}/subscriptions/{sub}/receive": "QueuesFunction",
}
WINDOW = {"Ref": "BackupRetentionDays"}


def plain(value):
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return str(value) if isinstance(value, str) else value


def backups(t):
    params, res = t["Parameters"], t["Resources"]
    bucket, table = res["SegmentBucket"]["Properties"], res["IndexTable"]["Properties"]
    if params["BackupRetentionDays"].get("MaxValue") not in (35, "35"):
        yield "BackupRetentionDays may exceed PITR's 35 days"
    if bucket.get("VersioningConfiguration") != {"Status": "Enabled"}:
        yield "the segment bucket is not versioned: a restored table would point at deleted objects"
    rules = bucket.get("LifecycleConfiguration", {}).get("Rules", [])
    kept = [r for r in rules if "NoncurrentVersionExpiration" in r]
    if [r["NoncurrentVersionExpiration"] for r in kept] != [{"NoncurrentDays": WINDOW}]:
        yield "deleted objects' versions must expire after exactly BackupRetentionDays"
    for rule in rules:
        if "ExpirationInDays" in rule or "NoncurrentVersionTransitions" in rule or "Transitions" in rule:
            yield f"lifecycle rule {rule.get('Id')} moves or expires current objects"
    if table["PointInTimeRecoverySpecification"].get("RecoveryPeriodInDays") != WINDOW:
        yield "the table's PITR window is not BackupRetentionDays"


def encryption(t):
    sse = t["Resources"]["IndexTable"]["Properties"]["SSESpecification"]
    if sse != {"Fn::If": ["HasKmsKey", {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": {"Ref": "KmsKeyArn"}},
                          {"SSEEnabled": False}]}:
        yield "the table must use the AWS-owned key (SSEEnabled false) unless KmsKeyArn is given"


def stream(t):
    events = t["Resources"]["DispatcherFunction"]["Properties"]["Events"]
    mapping = next(e["Properties"] for e in events.values() if e["Type"] == "DynamoDB")
    if not 60 <= int(mapping.get("MaximumRecordAgeInSeconds", -1)) <= 300:
        yield "the stream mapping keeps retrying old wakes (MaximumRecordAgeInSeconds unset or above 300)"
    if mapping.get("BisectBatchOnFunctionError") is not False:
        yield "the stream mapping bisects failed batches of wakes"


def throttles(t):
    res = t["Resources"]
    api = res["Api"]["Properties"]
    routes = {
        f"{e['Properties']['Method']} {e['Properties']['Path']}"
        for r in res.values() if r["Type"] == "AWS::Serverless::Function"
        for e in r["Properties"].get("Events", {}).values() if e["Type"] == "HttpApi"
    }
    if set(api.get("DefaultRouteSettings", {})) != {"ThrottlingRateLimit", "ThrottlingBurstLimit"}:
        yield "the API's stage has no default throttle"
    settings = api.get("RouteSettings", {})
    for route in sorted(set(settings) - routes):
        yield f"RouteSettings names {route}, which no function serves"
    for route, function in LONG_POLLS.items():
        if route not in routes:
            yield f"{route} has no route of its own ({function})"
        if settings.get(route) != {"ThrottlingRateLimit": {"Ref": "LongPollRateLimit"},
                                   "ThrottlingBurstLimit": {"Ref": "LongPollBurstLimit"}}:
            yield f"{route} is not throttled by LongPollRateLimit and LongPollBurstLimit"


def dispatcher(t):
    props = t["Resources"]["DispatcherFunction"]["Properties"]
    param = t["Parameters"]["DispatcherReservedConcurrency"]
    if [int(v) for v in param.get("AllowedValues", [])] != [0, 1]:
        yield "DispatcherReservedConcurrency must allow 0 (unreserved) and 1"
    if props.get("ReservedConcurrentExecutions") != {
        "Fn::If": ["ReservesDispatcher", {"Ref": "DispatcherReservedConcurrency"}, {"Ref": "AWS::NoValue"}]
    }:
        yield "the dispatcher's reserved concurrency is not left off at 0"


def main():
    template = plain(cfn_yaml.load(str(ROOT / "template.yaml")))
    errors = []
    for check in (backups, encryption, stream, throttles, dispatcher):
        try:
            errors += list(check(template))
        except (KeyError, StopIteration, TypeError, ValueError) as e:
            errors.append(f"{check.__name__}: the template lacks what it checks ({type(e).__name__}: {e})")
    for error in errors:
        print(f"template_check: {error}", file=sys.stderr)
    if not errors:
        print("template_check: backups, encryption, stream wakes, throttles and the dispatcher as documented")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
