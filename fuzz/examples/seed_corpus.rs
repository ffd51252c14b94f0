//! Writes the hand-made seeds of the fuzz targets into `fuzz/corpus/<target>/`: valid
//! segments from the real encoder, records from the real layout, receipts the queue
//! really issues, requests of every publish mode, query strings. Run from `fuzz/` with
//! `cargo run --example seed_corpus` after a change of format; a seed that exists is
//! overwritten, the fuzzer's own finds are left alone.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_core::groups::{GroupRecord, MemberRecord, OffsetRecord};
use sluice_core::layout::{self, HeadRecord, IdempotencyRecord, ObjectRecord, SegmentRecord, TopicRecord};
use sluice_core::queues::{CursorRecord, DeadRecord, LeaseRecord, Ordering, SubscriptionRecord};
use sluice_core::segment::{encode_segment, Record};
use sluice_fuzz::receipts::{Fields, Fixture, PARTITIONS};
use sluice_fuzz::stored::Stored;

fn write(target: &str, name: &str, bytes: impl AsRef<[u8]>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    std::fs::write(dir.join(name), bytes).expect("write a seed");
}

fn record(timestamp_ms: i64, key: Option<&str>, headers: &[(&str, &str)], value: &[u8], json: bool) -> Record {
    Record {
        timestamp_ms,
        key: key.map(|k| k.to_owned().into()),
        headers: headers.iter().map(|(n, v)| ((*n).to_owned(), v.to_string().into())).collect(),
        value: value.to_vec().into(),
        value_is_json: json,
    }
}

fn segment(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_segment(records, &mut out);
    out
}

fn segments() {
    let t = 1_704_067_200_000;
    write("segment_decode", "one-empty-record", segment(&[record(t, None, &[], b"", false)]));
    write(
        "segment_decode",
        "keys-headers-json",
        segment(&[
            record(t, Some("user-1"), &[("trace", "abc")], br#"{"n":1}"#, true),
            record(t - 5, None, &[], b"\x00\xffbinary", false),
            record(t + 9, Some(""), &[("a", ""), ("content-type", "application/json")], b"[1,2]", true),
        ]),
    );
    let many: Vec<Record> = (0..20).map(|i| record(t + i * 1000, Some("k"), &[], &[i as u8; 40], false)).collect();
    write("segment_decode", "twenty-records", segment(&many));
    write(
        "segment_decode",
        "extreme-timestamps",
        segment(&[record(i64::MIN, None, &[], b"x", false), record(i64::MAX, None, &[], b"y", false)]),
    );
    let mut two = segment(&[record(t, None, &[], b"first", false)]);
    two.extend(segment(&[record(t, None, &[], b"second", false)]));
    write("segment_decode", "two-segments-back-to-back", two);
}

/// A record of type `T`, from JSON as the core writes it, put through the real layout.
fn record_seed<T: Serialize + DeserializeOwned>(kind: &str, json: &str) {
    let record: T = layout::decode(kind, json.as_bytes()).unwrap_or_else(|e| panic!("update the {kind} seed: {e}"));
    let mut bytes = format!("{kind} ").into_bytes();
    bytes.extend_from_slice(&layout::encode(&record));
    write("state_values", kind, bytes);
}

fn state_values() {
    record_seed::<TopicRecord>("topic", r#"{"id":7,"partitions":3,"retention_ms":86400000,"created_ms":1}"#);
    record_seed::<HeadRecord>("head", r#"{"next":10,"start":2,"bytes":999,"max_ts":5}"#);
    let segment = r#"{"next":40,"object":"0001-a","pos":128,"len":900,"max_ts":9,"parts":[[10,300]]}"#;
    record_seed::<SegmentRecord>("segment", segment);
    record_seed::<ObjectRecord>("object", r#"{"refs":2,"bytes":4096,"doomed":true}"#);
    record_seed::<IdempotencyRecord>("idempotency", r#"{"fp":"00ff","results":[{"partition":1,"offset":4}]}"#);
    let spec = r#"{"start":{"offsets":{"0":5}},"visibility_timeout_ms":30000,"max_receive_count":5,"ordering":"key","#;
    let rest = r#""delay_ms":0,"redelivery_backoff":{"initial_ms":100,"max_ms":1000,"multiplier":2}}"#;
    let subscription = format!(r#"{{"id":3,"spec":{spec}{rest},"starts":[5,0],"created_ms":1}}"#);
    record_seed::<SubscriptionRecord>("subscription", &subscription);
    record_seed::<CursorRecord>("queue-cursor", r#"{"next":8,"dead":1,"expired":0}"#);
    let msgs = r#"[{"o":3,"f":10,"k":42},{"o":4,"f":0}]"#;
    let lease = format!(r#"{{"nonce":9,"receives":2,"held_until":100,"delivered_ms":50,"msgs":{msgs}}}"#);
    record_seed::<LeaseRecord>("lease", &lease);
    let dead = r#"{"reason":"max_receive_count_exceeded","receives":5,"first_ms":1,"last_ms":2,"dead_ms":3}"#;
    record_seed::<DeadRecord>("dead-letter", dead);
    let group = r#"{"generation":4,"members":{"m1":{"t":[0,2]}},"topics":{"t":7},"since":{"t":[[0,3]]}}"#;
    record_seed::<GroupRecord>("group", group);
    let member = r#"{"topics":["t"],"session_timeout_ms":30000,"positions":{"t":[[3,12]]},"positions_version":4}"#;
    record_seed::<MemberRecord>("member", member);
    record_seed::<OffsetRecord>("offset", r#"{"topic_id":7,"offset":12,"metadata":"m"}"#);
}

/// The real items of the `stored_values` partition, and a few telling changes to them.
fn stored_values() {
    let stored = Stored::get();
    for item in &stored.items {
        let mut bytes = format!("{} ", item.kind).into_bytes();
        bytes.extend(item.without_object());
        write("stored_values", item.kind, bytes);
    }
    let seeds = [
        (
            "segment-three-parts",
            r#"segment {"next":9,"object":"@object","pos":0,"len":90,"max_ts":0,"parts":[[3,30],[6,60]]}"#,
        ),
        ("segment-missing-object", r#"segment {"next":12,"object":"nowhere","pos":0,"len":100,"max_ts":0}"#),
        ("head-past-the-index", r#"head {"next":1000,"start":0,"bytes":0,"max_ts":9223372036854775807}"#),
        ("topic-no-partitions", r#"topic {"id":1,"partitions":0,"created_ms":0}"#),
    ];
    for (name, text) in seeds {
        write("stored_values", name, text);
    }
}

fn receipts() {
    let f = Fixture::new(Ordering::None);
    let issued = &f.issued;
    let seed = |name: &str, text: String| write("receipts", name, text);
    seed("ack-fresh", "ack @0 @1".into());
    seed("ack-verbatim", format!("ack {} {}", issued[0], issued[1]));
    seed("nack-receive-ack", "nack 0 @0\nreceive 10\nack @4".into());
    seed("extend-then-ack", "vis 60000 @2\nack @2 @4".into());
    seed("expire-redeliver", "tick 31000\nreceive 10\nnack 0 @4 @5\nreceive 10\nack @6".into());
    seed("dead-letter", "nack 0 @0\nreceive 1\nnack 0 @4\nreceive 1\nnack 0 @5\nreceive 1".into());
    seed("key-ordering", "ordering key\nack @0\nreceive 2\nvis 0 @1".into());
    seed("too-many", format!("ack{}", " @0".repeat(101)));
    seed("garbage", "ack AAAA not-a-receipt @99\nnack 99999999999 @0".into());
    let fields = f.key.open(&issued[0]).expect("an issued receipt verifies");
    seed("signed-as-issued", format!("ack !{}", sluice_fuzz::hex(&fields.body())));
    let elsewhere = Fields { partition: PARTITIONS + 5, ..fields };
    seed("signed-other-partition", format!("ack !{}", sluice_fuzz::hex(&elsewhere.body())));
}

fn publish() {
    let seed = |name: &str, text: &str| write("publish", name, text);
    seed("json-bare", r#"{"events":[{"value":1}]}"#);
    seed(
        "json-full",
        concat!(
            "content-type: application/json; charset=utf-8\nidempotency-key: req-1\n\n",
            r#"{"events":[{"key":"user-1","value":{"a":[1,2.5,"x"]},"headers":{"h":"v"},"timestamp_ms":5},"#,
            r#"{"value_base64":"aGVsbG8=","partition":1},{"key":"k\"2","value":null,"value_base64":""}]}"#
        ),
    );
    seed(
        "cloudevents-structured",
        concat!(
            "content-type: application/cloudevents+json\n\n",
            r#"{"specversion":"1.0","id":"1","source":"/orders","type":"order.created","#,
            r#""time":"2024-01-01T00:00:00.5Z","partitionkey":"o-1","data":{"total":3}}"#
        ),
    );
    seed(
        "cloudevents-batch",
        concat!(
            "content-type: application/cloudevents-batch+json\n\n",
            r#"[{"specversion":"1.0","id":"1","source":"/s","type":"t"},"#,
            r#"{"specversion":"1.0","id":"2","source":"/s","type":"t","time":"2024-02-29T23:59:59.999+01:00"}]"#
        ),
    );
    seed(
        "cloudevents-binary-json",
        concat!(
            "ce-specversion: 1.0\nce-id: 42\nce-source: /s\nce-type: t\nce-time: 2024-01-01T00:00:00Z\n",
            "ce-partitionkey: k\ncontent-type: application/json\n\n",
            r#"{"hello":"world"}"#
        ),
    );
    seed(
        "cloudevents-binary-bytes",
        "ce-specversion: 1.0\nce-id: 43\nce-source: /s\nce-type: t\nce-extra: x\nce-extra: y\n\n\x00\x01bytes",
    );
    seed("unsupported-media-type", "content-type: text/plain\n\nhello");
}

fn read_query() {
    let seeds = [
        ("events-default", "0/events"),
        ("events-offset-limit", "0/events?offset=3&limit=2"),
        ("events-earliest-bytes", "1/events?offset=earliest&max_bytes=100"),
        ("events-latest-wait", "2/events?offset=latest&wait_ms=10"),
        ("events-out-of-range", "0/events?offset=99999"),
        ("events-bad-limit", "1/events?limit=0&limit=3"),
        ("events-no-partition", "9/events?offset=1"),
        ("offsets-time", "0/offsets?timestamp_ms=1704067201500"),
        ("offsets-earliest", "1/offsets?timestamp_ms=earliest"),
        ("offsets-latest", "2/offsets?timestamp_ms=latest"),
        ("offsets-bad", "x/offsets?timestamp_ms=-1%20"),
    ];
    for (name, text) in seeds {
        write("read_query", name, text);
    }
}

fn main() {
    segments();
    state_values();
    stored_values();
    receipts();
    publish();
    read_query();
}
