//! State-store values as the log uses them, not only decodes them: the input, as in
//! `state_values`, is `<kind> <value>`, and the value replaces an item of a live partition
//! (`segment`: its compacted segment's index entry, `segment-tail`: its last one, `head`,
//! `topic`; `@object` in the value stands for the segment's object). The log then replays
//! the partition, looks up an offset by time and describes the topic; the item is put back.
//!
//! Oracle: no panic, no hang, no allocation past libFuzzer's limit: a value the log cannot
//! use fails the call (as corrupt data, or a client error such as a missing partition);
//! the original value reads as before.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::ports::state::{Expect, WriteOp};
use sluice_core::{Error, OffsetQuery, ReadRequest};
use sluice_fuzz::stored::{Item, Stored, PER_PUBLISH, TOPIC};

async fn put(stored: &Stored, item: &Item, value: Vec<u8>) {
    let op = WriteOp::Put { key: item.key.clone(), value: value.into(), expires_at_ms: None, expect: Expect::Any };
    stored.log.store().write(vec![op]).await.expect("overwrite an item");
}

/// What the log answers on the partition: each call's error, if it failed.
async fn exercise(stored: &Stored) -> Vec<Option<Error>> {
    let log = &stored.log;
    let read = |offset| ReadRequest {
        topic: TOPIC.to_owned(),
        partition: 0,
        offset,
        max_events: 1000,
        max_bytes: 1 << 20,
        wait_ms: 0,
    };
    vec![
        log.read(&read(0)).await.err(),
        log.read(&read(PER_PUBLISH + 1)).await.err(),
        log.offset(TOPIC, 0, OffsetQuery::Timestamp(i64::MIN)).await.err(),
        log.offset(TOPIC, 0, OffsetQuery::Timestamp(stored.topic.created_ms + 5000)).await.err(),
        log.offset(TOPIC, 0, OffsetQuery::Timestamp(i64::MAX)).await.err(),
        log.describe_topic(TOPIC).await.err(),
    ]
}

fuzz_target!(|data: &[u8]| {
    let stored = Stored::get();
    let Some(space) = data.iter().position(|&b| b == b' ') else { return };
    let Some(item) = stored.items.iter().find(|i| i.kind.as_bytes() == &data[..space]) else { return };
    let value = item.with_object(&data[space + 1..]);
    let original = value == item.value;
    sluice_fuzz::block_on(async {
        put(stored, item, value).await;
        let errors = exercise(stored).await;
        put(stored, item, item.value.to_vec()).await;
        if original {
            assert!(errors.iter().all(Option::is_none), "the original {} fails: {errors:?}", item.kind);
        }
    });
});
