//! The log against a reference model: random publishes (explicit partitions,
//! keys, no keys) and random reads (offsets, limits, byte budgets) on the
//! embedded backend must give exactly what a vector per partition gives.

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use sluice_core::partitioner::partition_for_key;
use sluice_core::{Error, Log, LogConfig, NewEvent, ReadRequest, SystemClock, TopicSpec};

const PARTITIONS: u32 = 3;

#[derive(Debug, Clone)]
enum Op {
    Publish(Vec<(Option<u8>, Option<u32>, Vec<u8>)>),
    Read { partition: u32, offset: u64, max_events: usize, max_bytes: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let event = (
        proptest::option::of(0u8..20),
        proptest::option::of(0..PARTITIONS),
        proptest::collection::vec(any::<u8>(), 0..64),
    );
    prop_oneof![
        proptest::collection::vec(event, 1..8).prop_map(Op::Publish),
        (0..PARTITIONS, 0u64..40, 1usize..10, 1usize..400).prop_map(|(partition, offset, max_events, max_bytes)| {
            Op::Read { partition, offset, max_events, max_bytes }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn log_behaves_like_a_vector_per_partition(ops in proptest::collection::vec(op(), 1..30)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let dir = tempfile::tempdir().unwrap();
            let (store, objects) = sluice_local::open(dir.path(), Arc::new(SystemClock)).unwrap();
            let log = Log::new(store, objects, Arc::new(SystemClock), LogConfig::default());
            log.create_topic("m", TopicSpec { partitions: PARTITIONS, retention_ms: None, retention_bytes: None }).await.unwrap();
            let mut model: Vec<Vec<(Option<Bytes>, Bytes)>> = vec![Vec::new(); PARTITIONS as usize];
            for op in ops {
                match op {
                    Op::Publish(events) => {
                        let batch: Vec<NewEvent> = events
                            .iter()
                            .map(|(key, partition, value)| NewEvent {
                                key: key.map(|k| Bytes::from(format!("key-{k}"))),
                                headers: vec![],
                                value: Bytes::from(value.clone()),
                                value_is_json: false,
                                timestamp_ms: None,
                                partition: *partition,
                            })
                            .collect();
                        let results = log.publish("m", batch.clone(), None).await.unwrap();
                        for (e, pos) in batch.into_iter().zip(results) {
                            if let Some(p) = e.partition {
                                assert_eq!(pos.partition, p, "explicit partition ignored");
                            } else if let Some(k) = &e.key {
                                assert_eq!(pos.partition, partition_for_key(k, PARTITIONS), "key on the wrong partition");
                            }
                            let log_p = &mut model[pos.partition as usize];
                            assert_eq!(pos.offset, log_p.len() as u64, "offset not the next one");
                            log_p.push((e.key, e.value));
                        }
                    }
                    Op::Read { partition, offset, max_events, max_bytes } => {
                        let expected = &model[partition as usize];
                        let req = ReadRequest { topic: "m".into(), partition, offset, max_events, max_bytes, wait_ms: 0 };
                        match log.read(&req).await {
                            Ok(batch) => {
                                assert!(offset <= expected.len() as u64);
                                assert_eq!(batch.high_watermark, expected.len() as u64);
                                let want = expected.len().saturating_sub(offset as usize).min(max_events);
                                assert!(batch.events.len() <= want);
                                assert!(want == 0 || !batch.events.is_empty(), "no progress from {offset}");
                                for (i, e) in batch.events.iter().enumerate() {
                                    let o = offset + i as u64;
                                    assert_eq!(e.offset, o);
                                    let (key, value) = &expected[o as usize];
                                    assert_eq!((&e.record.key, &e.record.value), (key, value));
                                }
                                assert_eq!(batch.next_offset, offset + batch.events.len() as u64);
                                let size: usize = batch.events.iter().map(|e| e.record.approx_size()).sum();
                                assert!(batch.events.len() <= 1 || size <= max_bytes, "max_bytes {max_bytes} exceeded: {size}");
                            }
                            Err(Error::OffsetOutOfRange { high_watermark, .. }) => {
                                assert!(offset > expected.len() as u64);
                                assert_eq!(high_watermark, expected.len() as u64);
                            }
                            Err(e) => panic!("read failed: {e}"),
                        }
                    }
                }
            }
        });
    }
}
