#!/usr/bin/env python3
"""Checks template.yaml keeps the promises docs/AWS.md makes of it that cfn-lint cannot see:

- a table restored to any time in its PITR window finds every object it references: the
  bucket is versioned and keeps a deleted object's version as long as the window;
- the table uses the AWS-owned key unless KmsKeyArn is given;
- a stream wake cannot block its shard: old wakes are dropped, failed batches not bisected;
  and it is not held back by a batching window (push is sub-second);
- the long-poll routes have routes, and throttles, of their own, and every route a
  throttle names exists;
- every operation of docs/openapi.json has an API Gateway route that takes it;
- the dispatcher's reserved concurrency is off by default (a new account deploys);
- the template, once SAM has transformed it, has no dependency cycle, counting references
  anywhere in a resource (an alias's UpdatePolicy names its deployment group): cfn-lint
  passes a cycle through the gradual deploys' alarm that CloudFormation refuses.

Run by .ci/run next to cfn-lint; exits 1 naming each broken promise.
"""
import json
import logging
import os
import re
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # before importing the module beside it: see its docstring
import cfn_template  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LONG_POLLS = {
    "POST /v1/groups/{group}/poll": "GroupsFunction",
    "POST /v1/topics/{topic}/subscriptions/{sub}/receive": "QueuesFunction",
}
WINDOW = {"Ref": "BackupRetentionDays"}


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
    period = table["PointInTimeRecoverySpecification"].get("RecoveryPeriodInDays")
    if period != {"Fn::If": ["HasPointInTimeRecovery", WINDOW, {"Ref": "AWS::NoValue"}]}:
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
    if int(mapping.get("MaximumBatchingWindowInSeconds", -1)) != 0:
        yield "the stream mapping holds wakes back (MaximumBatchingWindowInSeconds not 0): push is not sub-second"


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


def http_routes(t):
    """(method, path) of every HttpApi event of every function."""
    return {
        (e["Properties"]["Method"], e["Properties"]["Path"])
        for r in t["Resources"].values() if r["Type"] == "AWS::Serverless::Function"
        for e in r["Properties"].get("Events", {}).values() if e["Type"] == "HttpApi"
    }


def takes(route, method, path):
    """Whether an API Gateway route takes a request: a `{var}` segment takes any one segment."""
    r_method, r_path = route
    r_segs, segs = r_path.strip("/").split("/"), path.strip("/").split("/")
    same = all(r == s or (r.startswith("{") and r.endswith("}")) for r, s in zip(r_segs, segs))
    return r_method in ("ANY", method.upper()) and len(r_segs) == len(segs) and same


def reachable(t):
    routes = http_routes(t)
    spec = json.loads((ROOT / "docs" / "openapi.json").read_text())
    for path, item in sorted(spec["paths"].items()):
        for method in sorted(m for m in item if m in ("get", "post", "put", "patch", "delete")):
            if not any(takes(route, method, path) for route in routes):
                yield f"{method.upper()} {path} is in the OpenAPI document but no route takes it on AWS"


def dispatcher(t):
    props = t["Resources"]["DispatcherFunction"]["Properties"]
    param = t["Parameters"]["DispatcherReservedConcurrency"]
    if int(param.get("Default", -1)) != 0 or int(param.get("MinValue", -1)) != 0:
        yield "DispatcherReservedConcurrency must default to 0 (unreserved: a new account deploys)"
    if props.get("ReservedConcurrentExecutions") != {
        "Fn::If": ["ReservesDispatcher", {"Ref": "DispatcherReservedConcurrency"}, {"Ref": "AWS::NoValue"}]
    }:
        yield "the dispatcher's reserved concurrency is not left off at 0"


def rollbacks(t):
    """The API functions deploy gradually, each rolled back by an alarm the stack makes (named,
    not referenced: see `cycles`)."""
    res = t["Resources"]
    names = [r["Properties"].get("AlarmName") for r in res.values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    for name, r in res.items():
        props = r["Properties"]
        if r["Type"] != "AWS::Serverless::Function" or not any(
            e["Type"] == "HttpApi" for e in props.get("Events", {}).values()
        ):
            continue
        preference = props.get("DeploymentPreference", {})
        if props.get("AutoPublishAlias") != "live" or not preference.get("Alarms"):
            yield f"{name}: serves the API but does not deploy gradually with a rollback alarm"
        for alarm in preference.get("Alarms", []):
            if alarm not in names:
                yield f"{name}: rolls back on {alarm}, which is no alarm's AlarmName here"


def transformed():
    """The template as CloudFormation gets it after the SAM transform (offline: the
    functions' code as `sam build` would upload it, managed policies by name)."""
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    class Policies:
        def load(self):
            return {}

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    logging.getLogger("samtranslator").setLevel(logging.ERROR)
    template = yaml_parse((ROOT / "template.yaml").read_text())
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = "s3://artifacts/code.zip"
    return transform(template, {}, Policies())


def references(value, found):
    """Every resource name `value` refers to: Ref, GetAtt and ${...} in Sub."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str):
                found.add(inner)
            elif key == "Fn::GetAtt":
                found.add(inner[0] if isinstance(inner, list) else inner.split(".")[0])
            elif key == "Fn::Sub":
                text = inner if isinstance(inner, str) else inner[0]
                found.update(m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text))
                if not isinstance(inner, str):
                    references(inner[1], found)
            else:
                references(inner, found)
    elif isinstance(value, list):
        for inner in value:
            references(inner, found)
    return found


def cycles(_template):
    resources = transformed()["Resources"]
    graph = {}
    for name, resource in resources.items():
        found = references({k: v for k, v in resource.items() if k != "Type"}, set())
        depends = resource.get("DependsOn", [])
        found.update([depends] if isinstance(depends, str) else depends)
        graph[name] = sorted(found & set(resources))
    state, path = {}, []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                yield " -> ".join(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                yield from visit(nxt)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            for cycle in visit(node):
                yield f"dependency cycle after the SAM transform: {cycle}"


def main():
    template = cfn_template.load()
    errors = []
    for check in (backups, encryption, stream, throttles, reachable, dispatcher, rollbacks, cycles):
        try:
            errors += list(check(template))
        except (KeyError, StopIteration, TypeError, ValueError) as e:
            errors.append(f"{check.__name__}: the template lacks what it checks ({type(e).__name__}: {e})")
    for error in errors:
        print(f"template_check: {error}", file=sys.stderr)
    if not errors:
        print("template_check: backups, encryption, stream wakes, throttles, every API operation routed, the dispatcher and rollbacks as documented; no cycle")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
