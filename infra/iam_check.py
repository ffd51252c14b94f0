#!/usr/bin/env python3
"""Static IAM check: each function's policies in template.yaml allow exactly what its code
can call, and nothing more.

1. The calls: every SDK operation the adapters send (`.client.<op>()` in crates/aws/src,
   the service told by the file's `aws_sdk_<service>` import), and the kinds of item its
   `TransactWriteItems` are built from. A call missing from CALLS below fails the check:
   whoever adds one says here which IAM actions it needs.
2. The needs: NEEDS below says which of those calls each function's routes reach (the
   ports its handlers use; Rust's call graph is not parsed), checked against the calls
   the code has, so a need cannot outlive its call and every call is someone's need.
3. The grants: each function's inline policies (the template, read with cfn-lint's
   loader, which keeps CloudFormation's tags), as (action, resource) pairs, each resource
   one of the few the stack has. Granted must equal needed, both ways; a listing must be
   bounded to segments/, and the push targets' and KMS grants must sit under their
   parameters' conditions.

SAM adds managed policies besides (logs, X-Ray when Tracing=Active, the stream's reader):
docs/AWS.md lists them. `--self-test` breaks the inputs on purpose and fails unless each
breakage is caught. Run by .ci/run next to cfn-lint.
"""
import argparse
import copy
import re
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # before importing the module beside it: see its docstring
import cfn_template  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = ROOT / "crates" / "aws" / "src"

# Resources a statement may name, by how the template writes them.
RESOURCES = {
    "objects": {"Fn::Sub": "${SegmentBucket.Arn}/segments/*"},
    "bucket": {"Fn::GetAtt": ["SegmentBucket", "Arn"]},
    # The stack's table, or the one restored from it (RestoredTableName).
    "table": {
        "Fn::If": [
            "UsesRestoredTable",
            {"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${RestoredTableName}"},
            {"Fn::GetAtt": ["IndexTable", "Arn"]},
        ]
    },
    "push_targets": {"Ref": "PushLambdaArns"},
    # The dispatcher itself, by the name CloudFormation gives it (its ARN would be a cycle).
    "dispatcher": {
        "Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-DispatcherFunction-*"
    },
    "kms_key": {"Ref": "KmsKeyArn"},
}

# SDK operation (service:op as the Rust SDK names it) -> the (IAM action, resource) pairs it needs.
CALLS = {
    "s3:put_object": {("s3:PutObject", "objects")},
    # S3 answers a missing key 404 only to a caller that may list the bucket (403 otherwise).
    "s3:get_object": {("s3:GetObject", "objects"), ("s3:ListBucket", "bucket")},
    "s3:list_objects_v2": {("s3:ListBucket", "bucket")},
    "s3:delete_object": {("s3:DeleteObject", "objects")},
    "dynamodb:get_item": {("dynamodb:GetItem", "table")},
    "dynamodb:query": {("dynamodb:Query", "table")},
    "dynamodb:update_item": {("dynamodb:UpdateItem", "table")},
    "dynamodb:delete_item": {("dynamodb:DeleteItem", "table")},
    "dynamodb:batch_write_item": {("dynamodb:BatchWriteItem", "table")},
    # No action of its own: IAM authorises each item as its own action (TRANSACT_ITEMS).
    "dynamodb:transact_write_items": set(),
    # A push target's, or the dispatcher waking itself for a due time (wake.rs).
    "lambda:invoke": {("lambda:InvokeFunction", "push_targets"), ("lambda:InvokeFunction", "dispatcher")},
    "lambda:get_function_configuration": {("lambda:GetFunctionConfiguration", "push_targets")},
}

# A TransactWriteItems item kind (TransactWriteItem::builder().<kind>(…)) -> its IAM action.
TRANSACT_ITEMS = {
    "put": "dynamodb:PutItem",
    "update": "dynamodb:UpdateItem",
    "delete": "dynamodb:DeleteItem",
    "condition_check": "dynamodb:ConditionCheckItem",
}

TABLE_READS = ["dynamodb:get_item", "dynamodb:query"]
QUEUE_STATE = TABLE_READS + ["dynamodb:update_item", "dynamodb:delete_item", "dynamodb:transact_write_items"]

# What each function's code reaches: the calls, and the kinds of transaction item its writes hold.
NEEDS = {
    # Commits: updates and condition checks; never deletes, never reads objects.
    "PublishFunction": {
        "calls": TABLE_READS + ["dynamodb:update_item", "dynamodb:transact_write_items", "s3:put_object"],
        "transact": {"update", "condition_check"},
    },
    "ReadFunction": {"calls": TABLE_READS + ["s3:get_object"], "transact": set()},
    # Group state; deleting a group removes its offsets in batches.
    "GroupsFunction": {
        "calls": QUEUE_STATE + ["dynamodb:batch_write_item", "s3:get_object"],
        "transact": {"update", "delete", "condition_check"},
    },
    # Queue state; a Lambda push target's timeout is read when its subscription is created.
    "QueuesFunction": {
        "calls": QUEUE_STATE + ["s3:get_object", "lambda:get_function_configuration"],
        "transact": {"update", "delete", "condition_check"},
    },
    # Topic records; a delete is one tombstone write.
    "AdminFunction": {
        "calls": TABLE_READS + ["dynamodb:update_item", "dynamodb:transact_write_items"],
        "transact": {"update", "condition_check"},
    },
    # Purges, retention, compaction (reads and writes objects), collection (lists, deletes).
    "JanitorFunction": {
        "calls": QUEUE_STATE
        + ["dynamodb:batch_write_item", "s3:get_object", "s3:put_object", "s3:list_objects_v2", "s3:delete_object"],
        "transact": {"update", "delete", "condition_check"},
    },
    # Queue state as the queues function, reads the events it delivers, invokes Lambda
    # targets, and itself for a due time.
    "DispatcherFunction": {
        "calls": QUEUE_STATE + ["s3:get_object", "lambda:invoke"],
        "transact": {"update", "delete", "condition_check"},
    },
}

# Grants that exist only when a parameter is set, and the condition that must guard them.
GUARDED = {"push_targets": "HasPushLambdas", "kms_key": "HasKmsKey"}
# With KmsKeyArn, every function uses the key through S3 and DynamoDB.
KMS_GRANTS = {("kms:Decrypt", "kms_key"), ("kms:GenerateDataKey", "kms_key")}
KMS_VIA = {"s3.${AWS::Region}.amazonaws.com", "dynamodb.${AWS::Region}.amazonaws.com"}
# A listing must stay under segments/ (IfExists: GetObject's own 404 check has no prefix).
LIST_CONDITION = {"StringLikeIfExists": {"s3:prefix": "segments/*"}}


def code_calls(sources):
    """{service:op} the adapters send, and the transaction item kinds they build, from
    {file name: Rust source}."""
    calls, kinds, errors = set(), set(), []
    for name, text in sources.items():
        services = set(re.findall(r"\baws_sdk_([a-z0-9]+)::", text))
        ops = re.findall(r"\.client\s*\.\s*([a-z_0-9]+)\s*\(", text)
        if ops and len(services) != 1:
            errors.append(f"{name}: calls {sorted(set(ops))} but imports the SDKs {sorted(services)}: which service?")
            continue
        calls.update(f"{s}:{op}" for s in services for op in ops)
        kinds.update(re.findall(r"TransactWriteItem::builder\(\)\s*\.\s*([a-z_]+)\s*\(", text))
    return calls, kinds, errors


def resource_kind(resource):
    for kind, written in RESOURCES.items():
        if resource == written:
            return kind
    return None


def statements(policies):
    """(statement, condition name or None) for each statement of a function's Policies."""
    for policy in policies:
        guard = None
        if isinstance(policy, dict) and "Fn::If" in policy:
            guard, policy, _ = policy["Fn::If"]
        if not isinstance(policy, dict) or "Statement" not in policy:
            yield {"unsupported": policy}, guard
            continue
        for statement in policy["Statement"]:
            inner = guard
            if isinstance(statement, dict) and "Fn::If" in statement:
                inner, statement, _ = statement["Fn::If"]
            yield statement, inner


def grants(function, policies):
    """{(action, resource kind)} a function's policies allow, and the errors in how they say it."""
    granted, errors = set(), []
    for statement, guard in statements(policies):
        where = f"{function}: statement {statement}"
        if statement.get("Effect") != "Allow" or set(statement) - {"Effect", "Action", "Resource", "Condition"}:
            errors.append(f"{where}: only Allow statements of Action, Resource and Condition are checked")
            continue
        kind = resource_kind(statement.get("Resource"))
        if kind is None:
            errors.append(f"{where}: names a resource this check does not know")
            continue
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if any("*" in a for a in actions):
            errors.append(f"{where}: wildcard action")
        if GUARDED.get(kind) != guard:
            errors.append(f"{where}: must be guarded by {GUARDED.get(kind)}, is by {guard}")
        condition = statement.get("Condition")
        if "s3:ListBucket" in actions and condition != LIST_CONDITION:
            errors.append(f"{where}: a listing must carry {LIST_CONDITION}")
        if kind == "kms_key":
            via = condition.get("StringEquals", {}).get("kms:ViaService") if condition else None
            subs = {v.get("Fn::Sub") if isinstance(v, dict) else v for v in via or []}
            if subs != KMS_VIA:
                errors.append(f"{where}: the key must be usable only through {sorted(KMS_VIA)}")
        elif condition is not None and "s3:ListBucket" not in actions:
            errors.append(f"{where}: unexpected condition")
        granted.update((a, kind) for a in actions)
    return granted, errors


def needed(function, need):
    pairs = set().union(*(CALLS[c] for c in need["calls"]))
    pairs.update((TRANSACT_ITEMS[k], "table") for k in need["transact"])
    return pairs | KMS_GRANTS


def check(resources, calls, kinds):
    """Every difference between what the code can call and what the template grants."""
    errors = [f"the adapters call {c}, which CALLS does not map to IAM actions" for c in sorted(calls - set(CALLS))]
    errors += [f"the adapters build transaction items {k!r} that TRANSACT_ITEMS does not map" for k in sorted(kinds - set(TRANSACT_ITEMS))]
    used = set()
    functions = {n for n, r in resources.items() if r.get("Type") == "AWS::Serverless::Function"}
    for name in sorted(functions - set(NEEDS)):
        errors.append(f"{name}: a function NEEDS does not describe")
    for name, need in NEEDS.items():
        if name not in functions:
            errors.append(f"{name}: in NEEDS, not in the template")
            continue
        used.update(need["calls"])
        for call in sorted(set(need["calls"]) - calls):
            errors.append(f"{name}: needs {call}, which the adapters never call")
        for kind in sorted(need["transact"] - kinds):
            errors.append(f"{name}: needs transaction items {kind!r}, which the adapters never build")
        if need["transact"] and "dynamodb:transact_write_items" not in need["calls"]:
            errors.append(f"{name}: transaction items without dynamodb:transact_write_items")
        granted, why = grants(name, resources[name]["Properties"].get("Policies", []))
        errors += why
        want = needed(name, need)
        for action, kind in sorted(want - granted):
            errors.append(f"{name}: its code needs {action} on {kind}; the template does not grant it")
        for action, kind in sorted(granted - want):
            errors.append(f"{name}: granted {action} on {kind}, which its code never calls")
    errors += [f"the adapters call {c}, which no function NEEDS" for c in sorted((calls & set(CALLS)) - used)]
    built = set().union(*(n["transact"] for n in NEEDS.values()))
    errors += [f"the adapters build transaction items {k!r}, which no function NEEDS" for k in sorted(kinds - built)]
    return errors


def load():
    template = cfn_template.load()
    sources = {p.name: p.read_text() for p in sorted(ADAPTERS.rglob("*.rs"))}
    return template["Resources"], sources


def self_test(resources, sources):
    """Each breakage must be caught; returns the ones that were not."""
    def policies(r, fn):
        return r[fn]["Properties"]["Policies"][0]["Statement"]

    def drop_list_for_read(r, s):
        policies(r, "ReadFunction")[:] = [x for x in policies(r, "ReadFunction") if "s3:ListBucket" not in x["Action"]]

    def delete_for_publish(r, s):
        policies(r, "PublishFunction")[0]["Action"] = ["s3:PutObject", "s3:DeleteObject"]

    def unbounded_listing(r, s):
        for x in policies(r, "JanitorFunction"):
            x.pop("Condition", None) if "s3:ListBucket" in x["Action"] else None

    def unknown_call(r, s):
        s["s3.rs"] += "\nfn f(&self) { self.client.copy_object().send(); }\n"

    def put_item_in_transaction(r, s):
        s["state.rs"] += "\nfn g() { TransactWriteItem::builder().put(x); }\n"

    def invoke_unguarded(r, s):
        stmts = policies(r, "DispatcherFunction")
        stmts[-1] = stmts[-1]["Fn::If"][1]

    def wildcard(r, s):
        policies(r, "ReadFunction")[0]["Resource"] = "*"

    def call_removed(r, s):
        s["s3.rs"] = s["s3.rs"].replace(".delete_object()", ".head_object()")

    breakages = [drop_list_for_read, delete_for_publish, unbounded_listing, unknown_call,
                 put_item_in_transaction, invoke_unguarded, wildcard, call_removed]
    missed = []
    for breakage in breakages:
        r, s = copy.deepcopy(resources), dict(sources)
        breakage(r, s)
        calls, kinds, errors = code_calls(s)
        if not errors + check(r, calls, kinds):
            missed.append(breakage.__name__)
    return missed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-test", action="store_true", help="also check that breakages are caught")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the calls found and each function's grants")
    args = parser.parse_args()
    resources, sources = load()
    calls, kinds, errors = code_calls(sources)
    errors += check(resources, calls, kinds)
    if args.verbose:
        print("calls:", ", ".join(sorted(calls)), "| transaction items:", ", ".join(sorted(kinds)))
        for name, need in NEEDS.items():
            print(f"{name}: " + ", ".join(f"{a} on {k}" for a, k in sorted(needed(name, need))))
    if args.self_test:
        missed = self_test(resources, sources)
        errors += [f"self-test: breakage {m!r} was not caught" for m in missed]
    for error in errors:
        print(f"iam_check: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"iam_check: {len(NEEDS)} functions grant exactly what their {len(calls)} kinds of SDK call need")
    return 0


if __name__ == "__main__":
    sys.exit(main())
