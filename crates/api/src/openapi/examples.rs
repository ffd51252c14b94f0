//! The document's examples: one story, in the order tests/openapi.rs replays them against a
//! fresh server (a topic `orders` of 2 partitions; 3 events; a subscription `workers` that
//! dead-letters at the first nack; a static member `worker-1` of group `billing`). Request
//! examples are sent as they are (receipts excepted: the test puts in those the server gave);
//! each answer example must pass its schema.

use serde_json::{json, Value};

const CREATED_MS: i64 = 1767225600000;

pub(crate) fn create_topic() -> Value {
    json!({ "partitions": 2 })
}

pub(crate) fn topic() -> Value {
    json!({ "name": "orders", "partitions": 2, "retention_ms": null, "retention_bytes": null,
            "created_ms": CREATED_MS })
}

pub(crate) fn topics() -> Value {
    json!({ "topics": [topic()] })
}

pub(crate) fn topic_description() -> Value {
    let mut out = topic();
    out["partition_states"] = json!([
        { "partition": 0, "log_start_offset": 0, "high_watermark": 2, "bytes": 180 },
        { "partition": 1, "log_start_offset": 0, "high_watermark": 1, "bytes": 60 },
    ]);
    out["upkeep"] = json!({ "segments_expired": 0, "bytes_expired": 0, "segments_merged": 0,
                            "segments_written": 0, "last_change_ms": 0 });
    out
}

pub(crate) fn publish() -> Value {
    json!({ "events": [
        { "key": "order-42", "value": { "status": "created" }, "headers": { "source": "shop" }, "partition": 0 },
        { "key": "order-42", "value": { "status": "paid" }, "partition": 0 },
        { "value_base64": "aGVsbG8=", "partition": 1 },
    ] })
}

pub(crate) fn cloudevent() -> Value {
    json!({ "specversion": "1.0", "id": "evt-1", "source": "/shop", "type": "order.shipped",
            "partitionkey": "order-7", "time": "2026-01-01T00:00:00Z", "data": { "carrier": "post" } })
}

pub(crate) fn cloudevents() -> Value {
    json!([cloudevent(), { "specversion": "1.0", "id": "evt-2", "source": "/shop", "type": "order.delivered" }])
}

pub(crate) fn published() -> Value {
    json!({ "results": [
        { "partition": 0, "offset": 0 }, { "partition": 0, "offset": 1 }, { "partition": 1, "offset": 0 },
    ] })
}

pub(crate) fn read_page() -> Value {
    json!({ "events": [
        { "partition": 0, "offset": 0, "timestamp_ms": CREATED_MS, "key": "order-42",
          "headers": { "source": "shop" }, "value": { "status": "created" } },
        { "partition": 0, "offset": 1, "timestamp_ms": CREATED_MS, "key": "order-42",
          "headers": {}, "value": { "status": "paid" } },
    ], "next_offset": 2, "high_watermark": 2, "log_start_offset": 0 })
}

pub(crate) fn offset() -> Value {
    json!({ "partition": 0, "offset": 0 })
}

pub(crate) fn create_subscription() -> Value {
    json!({ "start": "earliest", "max_receive_count": 1, "visibility_timeout_ms": 30000 })
}

pub(crate) fn subscription() -> Value {
    json!({ "topic": "orders", "name": "workers", "start": "earliest", "visibility_timeout_ms": 30000,
            "max_receive_count": 1, "ordering": "none", "delay_ms": 0, "redelivery_backoff_ms": null,
            "filter": null, "push": null, "rate": null, "start_offsets": [0, 0], "created_ms": CREATED_MS, "state": "active" })
}

pub(crate) fn subscriptions() -> Value {
    json!({ "subscriptions": [subscription()] })
}

fn backlog(visible: u64) -> Value {
    json!({ "visible": visible, "in_flight": 0, "delayed": 0, "scheduled": 0, "dead": 0, "expired": 0,
            "filtered": 0, "unscanned": 0, "oldest_visible_age_ms": if visible > 0 { json!(1200) } else { Value::Null } })
}

pub(crate) fn subscription_description() -> Value {
    let mut out = subscription();
    out["backlog"] = backlog(3);
    out["exact"] = json!(true);
    out["partitions"] = json!([
        { "partition": 0, "cursor": 0, "high_watermark": 2, "backlog": backlog(2) },
        { "partition": 1, "cursor": 0, "high_watermark": 1, "backlog": backlog(1) },
    ]);
    out
}

pub(crate) fn patch_subscription() -> Value {
    json!({ "visibility_timeout_ms": 45000, "rate": { "per_second": 50, "burst": 100 } })
}

pub(crate) fn patched_subscription() -> Value {
    let mut out = subscription_description();
    out["visibility_timeout_ms"] = json!(45000);
    out["rate"] = json!({ "per_second": 50, "burst": 100 });
    out["throttled_ms"] = json!(0);
    out
}

pub(crate) fn paused_subscription() -> Value {
    let mut out = subscription_description();
    out["state"] = json!("paused");
    out
}

pub(crate) fn seek_subscription() -> Value {
    json!({ "to": { "timestamp_ms": 1_767_225_600_000_i64 }, "dry_run": true })
}

pub(crate) fn subscription_sought() -> Value {
    json!({ "applied": false, "redeliver": 3, "skip": 0, "partitions": [
        { "partition": 0, "from": 5, "to": 3, "redeliver": 2, "skip": 0 },
        { "partition": 1, "from": 2, "to": 1, "redeliver": 1, "skip": 0 },
    ] })
}

pub(crate) fn subscription_purged() -> Value {
    json!({ "applied": true, "redeliver": 0, "skip": 4, "partitions": [
        { "partition": 0, "from": 5, "to": 8, "redeliver": 0, "skip": 3 },
        { "partition": 1, "from": 2, "to": 3, "redeliver": 0, "skip": 1 },
    ] })
}

pub(crate) fn rotate_secret() -> Value {
    json!({ "overlap_ms": 3_600_000 })
}

pub(crate) fn secret_rotated() -> Value {
    json!({ "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "previous_expires_ms": CREATED_MS + 3_600_000 })
}

pub(crate) fn receive() -> Value {
    json!({ "max_messages": 10, "wait_ms": 0 })
}

pub(crate) fn received() -> Value {
    json!({ "messages": [
        { "receipt": "AAAAAQAAAAAAAAAAAAAAAWSFb2Jx", "partition": 0, "offset": 0, "receive_count": 1,
          "first_receive_ms": CREATED_MS + 5000, "timestamp_ms": CREATED_MS, "key": "order-42",
          "headers": { "source": "shop" }, "value": { "status": "created" } },
    ] })
}

pub(crate) fn peeked() -> Value {
    json!({ "messages": [
        { "partition": 0, "offset": 0, "receive_count": 0, "timestamp_ms": CREATED_MS, "key": "order-42",
          "headers": { "source": "shop" }, "value": { "status": "created" } },
    ] })
}

pub(crate) fn visibility() -> Value {
    json!({ "receipts": ["AAAAAQAAAAAAAAAAAAAAAWSFb2Jx"], "visibility_timeout_ms": 60000 })
}

pub(crate) fn renewed() -> Value {
    json!({ "results": [{ "receipt": "AAAAAQAAAAAAAAAAAAAAAmSFb2Jy", "ok": true }] })
}

pub(crate) fn nack() -> Value {
    json!({ "receipts": ["AAAAAQAAAAAAAAAAAAAAAmSFb2Jy"], "delay_ms": 0 })
}

pub(crate) fn ack() -> Value {
    json!({ "receipts": ["AAAAAQAAAAAAAAAAAAAAAmSFb2Jy"] })
}

pub(crate) fn settled() -> Value {
    json!({ "results": [
        { "receipt": "AAAAAQAAAAAAAAAAAAAAAmSFb2Jy", "ok": true },
        { "receipt": "AAAAAQAAAAAAAAAAAAAAAWSFb2Jx", "ok": false,
          "error": { "code": "stale_receipt", "message": "the message was settled or redelivered since" } },
    ] })
}

pub(crate) fn dead_letters() -> Value {
    json!({ "dead_letters": [
        { "id": "0-1", "partition": 0, "offset": 1, "reason": "nacked at max_receive_count", "receive_count": 1,
          "first_receive_ms": CREATED_MS + 5000, "last_receive_ms": CREATED_MS + 5000, "dead_ms": CREATED_MS + 6000,
          "event": { "timestamp_ms": CREATED_MS, "key": "order-42", "headers": {}, "value": { "status": "paid" } } },
    ], "next": null })
}

pub(crate) fn redrive() -> Value {
    json!({ "max_messages": 10 })
}

pub(crate) fn redriven() -> Value {
    json!({ "redriven": 2 })
}

pub(crate) fn purged() -> Value {
    json!({ "purged": 0 })
}

pub(crate) fn poll() -> Value {
    json!({ "topics": ["orders"], "instance_id": "worker-1", "max_events": 10, "session_timeout_ms": 45000 })
}

pub(crate) fn polled() -> Value {
    json!({ "member_id": "i.worker-1", "generation": 1,
            "assignment": [{ "topic": "orders", "partition": 0 }, { "topic": "orders", "partition": 1 }],
            "events": [{ "topic": "orders", "partition": 0, "offset": 0, "timestamp_ms": CREATED_MS,
                         "key": "order-42", "headers": { "source": "shop" }, "value": { "status": "created" } }] })
}

pub(crate) fn commit() -> Value {
    json!({ "member_id": "i.worker-1", "generation": 1,
            "offsets": [{ "topic": "orders", "partition": 0, "offset": 2, "metadata": "batch 7" }] })
}

pub(crate) fn seek() -> Value {
    json!({ "topic": "orders", "to": "earliest" })
}

pub(crate) fn sought() -> Value {
    json!({ "offsets": [
        { "topic": "orders", "partition": 0, "offset": 0 }, { "topic": "orders", "partition": 1, "offset": 0 },
    ] })
}

pub(crate) fn leave() -> Value {
    json!({ "member_id": "i.worker-1" })
}

pub(crate) fn groups() -> Value {
    json!({ "groups": ["billing"] })
}

pub(crate) fn group() -> Value {
    json!({ "group": "billing", "generation": 3, "members": [],
            "partitions": [
                { "topic": "orders", "partition": 0, "committed_offset": 0, "metadata": null, "log_start_offset": 0,
                  "high_watermark": 2, "lag": 2, "member_id": null },
                { "topic": "orders", "partition": 1, "committed_offset": 0, "metadata": null, "log_start_offset": 0,
                  "high_watermark": 3, "lag": 3, "member_id": null },
            ],
            "lag": 5, "offsets_expire_at_ms": CREATED_MS + 7 * 86_400_000 })
}
