//! A partition whose state-store items a target overwrites, to see what the log does with
//! values it reads back: a topic of one partition, its early publishes compacted into one
//! segment of two parts (parts are 256 KiB), later ones in segments of their own.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use sluice_core::layout::{self, SegmentRecord};
use sluice_core::ports::state::{Key, Query};
use sluice_core::upkeep::{Janitor, JanitorConfig};
use sluice_core::{Limits, Log, NewEvent, TopicConfig, TopicSpec};

pub const TOPIC: &str = "stored";
/// Stands for the name of the partition's segment object in a value (names are not repeatable).
pub const OBJECT: &str = "@object";
/// Publishes before the compaction, and after it; events per publish, and their size.
const COMPACTED: u64 = 4;
const TAIL: u64 = 2;
pub const PER_PUBLISH: u64 = 3;
const VALUE_BYTES: usize = 30_000;
const START_MS: i64 = 1_704_067_200_000;

/// An item a target may overwrite: `kind` is how inputs name it.
pub struct Item {
    pub kind: &'static str,
    pub key: Key,
    pub value: Bytes,
    /// The object a segment record names, which a value may call [`OBJECT`].
    pub object: Option<String>,
}

impl Item {
    /// `value` with [`OBJECT`] standing for the item's object, and the other way round.
    pub fn with_object(&self, value: &[u8]) -> Vec<u8> {
        replace(value, OBJECT.as_bytes(), self.object.as_deref().unwrap_or(OBJECT).as_bytes())
    }

    pub fn without_object(&self) -> Vec<u8> {
        replace(&self.value, self.object.as_deref().unwrap_or(OBJECT).as_bytes(), OBJECT.as_bytes())
    }
}

fn replace(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    while let Some(i) = rest.windows(from.len()).position(|w| w == from) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(to);
        rest = &rest[i + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

pub struct Stored {
    pub log: Log,
    pub topic: TopicConfig,
    /// `segment` (the compacted one), `segment-tail` (the last), `head` and `topic`.
    pub items: Vec<Item>,
}

impl Stored {
    /// Made once per process. Not inside [`crate::block_on`].
    pub fn get() -> &'static Stored {
        static STORED: OnceLock<Stored> = OnceLock::new();
        STORED.get_or_init(|| crate::block_on(Self::new()))
    }

    async fn new() -> Self {
        let clock = Arc::new(crate::VirtualClock::new(START_MS));
        let log = crate::open_log(&crate::lasting_scratch_dir(), clock.clone(), 3, Limits::default());
        let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None };
        let (topic, _) = log.create_topic(TOPIC, spec).await.expect("create the topic");
        for n in 0..COMPACTED + TAIL {
            if n == COMPACTED {
                let config = JanitorConfig {
                    default_retention_ms: 100 * 365 * 24 * 3600 * 1000,
                    compaction_target_bytes: 1 << 20,
                    ..JanitorConfig::default()
                };
                let janitor = Janitor::new(log.store().clone(), log.objects().clone(), clock.clone(), config);
                janitor.run(1000).await.expect("a janitor round");
            }
            let events = (0..PER_PUBLISH)
                .map(|i| NewEvent {
                    key: Some(format!("k{i}").into()),
                    headers: vec![],
                    value: vec![(n * PER_PUBLISH + i) as u8; VALUE_BYTES].into(),
                    value_is_json: false,
                    timestamp_ms: Some(START_MS + ((n * 7 + i * 3) % 10) as i64 * 1000),
                    partition: Some(0),
                })
                .collect();
            log.publish(TOPIC, events, None).await.expect("publish");
        }

        let store = log.store();
        let page = store.query(&Query::all(sluice_core::keys::segments_pk(topic.id, 0), 100)).await.expect("read the index");
        let (Some(first), Some(last)) = (page.items.first(), page.items.last()) else { panic!("no segments") };
        let segment = |kind, item: &sluice_core::ports::state::Item| {
            let record: SegmentRecord = layout::decode("segment", &item.value).expect("a segment record");
            let object = Some(record.object.clone());
            (Item { kind, key: item.key.clone(), value: item.value.clone(), object }, record)
        };
        let (compacted, record) = segment("segment", first);
        assert!(!record.parts.is_empty(), "the first segment is not compacted: {record:?}");
        let mut items = vec![compacted, segment("segment-tail", last).0];
        for (kind, key) in [("head", sluice_core::keys::head_key(topic.id, 0)), ("topic", sluice_core::keys::topic_key(TOPIC))] {
            let item = store.get(&key).await.expect("read an item").expect("the item exists");
            items.push(Item { kind, key, value: item.value, object: None });
        }
        Self { log, topic, items }
    }
}
