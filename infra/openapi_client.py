"""A client generated from Sluice's OpenAPI document by a standard generator, used.

openapi-python-client (which reads OpenAPI 3.1; Rust's progenitor reads 3.0 only)
generates a Python package from docs/openapi.json into a scratch directory; this script
imports it and runs a short story against a running `serve` through the generated
functions and models only: create a topic, publish (with an Idempotency-Key, twice),
replay, a work queue's receive and ack riding on the next receive, a group poll and
commit, and an error answered as its typed model. Exits non-zero on any mismatch.

Usage: openapi_client.py BASE_URL  (infra/schemathesis.sh runs it against its server)
"""

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generate(into: Path) -> None:
    tool = ROOT / ".venv" / "bin" / "openapi-python-client"
    args = [str(tool), "generate", "--path", str(ROOT / "docs" / "openapi.json"), "--meta", "none",
            "--output-path", str(into / "sluice_api_client")]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    # The generator says what it could not turn into code: every schema must make it.
    if done.returncode != 0 or "Unable to process" in done.stdout + done.stderr:
        sys.exit(f"openapi-python-client failed:\n{done.stdout}\n{done.stderr}")


def expect(what: str, got, want) -> None:
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def send_publish(client, publish, batch, key):
    """Publishes through the generated module's request and answer code. Its `sync` cannot
    be called as generated (0.29): for a body of several content types it tests
    `isinstance(body, list[CloudEvent])`, which Python refuses; so the JSON batch's request
    is built here from the generated model, and the answer parsed by the generated parser."""
    response = client.get_httpx_client().request(
        "post", "/v1/topics/generated/events", json=batch.to_dict(),
        headers={"Content-Type": "application/json", "Idempotency-Key": key})
    return publish._build_response(client=client, response=response).parsed


def story(base: str) -> int:
    from sluice_api_client import Client
    from sluice_api_client.api.groups import commit, describe_group, poll
    from sluice_api_client.api.publish import publish
    from sluice_api_client.api.queues import create_subscription, receive
    from sluice_api_client.api.read import read_events
    from sluice_api_client.api.topics import create_topic, describe_topic
    from sluice_api_client.models import (CommitOffset, CommitRequest, CreateSubscription, CreateTopic,
                                          NewEvent, PollRequest, PublishBatch, Published, ReadPage,
                                          ReceiveRequest, Received, Topic)
    from sluice_api_client.models.start_type_1 import StartType1

    client = Client(base_url=base, raise_on_unexpected_status=True)
    topic = create_topic.sync("generated", client=client, body=CreateTopic(partitions=2))
    expect("created topic", (type(topic), topic.partitions), (Topic, 2))
    batch = PublishBatch(events=[NewEvent(key=f"k{n}", value={"n": n}) for n in range(6)])
    first, again = (send_publish(client, publish, batch, "gen-1") for _ in range(2))
    expect("published", type(first), Published)
    expect("a retry under the same key", [r.to_dict() for r in again.results], [r.to_dict() for r in first.results])
    values = []
    for partition in range(2):
        page = read_events.sync("generated", partition, client=client, offset=0, limit=100)
        expect("replay", type(page), ReadPage)
        values += [e.value["n"] for e in page.events]
    expect("replayed values", sorted(values), list(range(6)))

    sub = CreateSubscription(start=StartType1.EARLIEST, max_receive_count=3)
    create_subscription.sync("generated", "work", client=client, body=sub)
    got = receive.sync("generated", "work", client=client, body=ReceiveRequest(max_messages=10, wait_ms=0))
    expect("received", (type(got), len(got.messages)), (Received, 6))
    receipts = [m.receipt for m in got.messages]
    done = receive.sync("generated", "work", client=client, body=ReceiveRequest(max_messages=10, ack=receipts))
    expect("acks riding on a receive", [a.ok for a in done.acks], [True] * 6)

    polled = poll.sync("readers", client=client, body=PollRequest(topics=["generated"], max_events=100))
    expect("polled", len(polled.events), 6)
    offsets = [CommitOffset(topic="generated", partition=p.partition, offset=max(
        e.offset for e in polled.events if e.partition == p.partition) + 1)
        for p in polled.assignment if any(e.partition == p.partition for e in polled.events)]
    answer = commit.sync_detailed("readers", client=client, body=CommitRequest(
        member_id=polled.member_id, generation=polled.generation, offsets=offsets))
    expect("commit", answer.status_code, 204)
    expect("lag", describe_group.sync("readers", client=client).lag, 0)

    missing = describe_topic.sync("no-such-topic", client=client)
    expect("an error's typed code", (type(missing).__name__, missing.error.code.value),
           ("DescribeTopicResponse404", "topic_not_found"))
    return sum(1 for _ in (Path(sys.modules["sluice_api_client"].__file__).parent / "api").rglob("*.py"))


def main() -> None:
    base = sys.argv[1]
    with tempfile.TemporaryDirectory() as scratch:
        generate(Path(scratch))
        sys.path.insert(0, scratch)
        modules = story(base)
    print(f"openapi-python-client: generated {modules} API modules; the story ran against {base}")


if __name__ == "__main__":
    main()
