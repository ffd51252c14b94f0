//! Micro benchmark: the embedded commit path (validate, place, encode, write +
//! fdatasync, SQLite commit) through `Log::publish`, one caller and many.

use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_core::{Log, LogConfig, NewEvent, SystemClock, TopicSpec};

fn events(n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent {
            key: Some(Bytes::from(format!("key-{i}"))),
            headers: vec![],
            value: Bytes::from(vec![b'x'; 1024]),
            value_is_json: false,
            timestamp_ms: None,
            partition: None,
        })
        .collect()
}

fn commit(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = rt.block_on(async {
        let (store, objects) = sluice_local::open(dir.path(), Arc::new(SystemClock)).expect("open");
        let log = Log::new(store, objects, Arc::new(SystemClock), LogConfig::default());
        log.create_topic("bench", TopicSpec { partitions: 8, retention_ms: None, retention_bytes: None })
            .await
            .expect("topic");
        log
    });
    let mut g = c.benchmark_group("embedded commit");
    for batch in [1, 100] {
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("publish {batch} x 1 KiB, fsynced"), |b| {
            b.iter(|| rt.block_on(log.publish("bench", events(batch), None)).expect("publish"))
        });
    }
    // 64 concurrent single-event publishes: how far group commit amortises the fsyncs.
    g.throughput(Throughput::Elements(64));
    g.bench_function("64 concurrent publishes of 1 x 1 KiB", |b| {
        b.iter(|| {
            rt.block_on(async {
                let tasks: Vec<_> = (0..64)
                    .map(|_| {
                        let log = log.clone();
                        tokio::spawn(async move { log.publish("bench", events(1), None).await })
                    })
                    .collect();
                for t in tasks {
                    t.await.expect("join").expect("publish");
                }
            })
        })
    });
    g.finish();
}

criterion_group!(benches, commit);
criterion_main!(benches);
