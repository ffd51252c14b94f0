//! Micro benchmarks: the segment codec and the partitioner.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sluice_core::partitioner::partition_for_key;
use sluice_core::segment::{decode_segment, encode_segment, Record};

fn records(n: usize, value_size: usize) -> Vec<Record> {
    (0..n)
        .map(|i| Record {
            timestamp_ms: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("key-{i}"))),
            headers: vec![("source".into(), Bytes::from_static(b"bench"))],
            value: Bytes::from(vec![b'x'; value_size]),
            value_is_json: false,
        })
        .collect()
}

fn codec(c: &mut Criterion) {
    let recs = records(100, 1024);
    let mut g = c.benchmark_group("segment");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.bench_function("encode 100 x 1 KiB", |b| {
        b.iter_batched_ref(|| Vec::with_capacity(128 << 10), |out| encode_segment(&recs, out), BatchSize::SmallInput)
    });
    let mut encoded = Vec::new();
    encode_segment(&recs, &mut encoded);
    let encoded = Bytes::from(encoded);
    g.bench_function("decode 100 x 1 KiB", |b| b.iter(|| decode_segment(&encoded).map(|r| r.len())));
    g.finish();
}

fn partitioner(c: &mut Criterion) {
    let keys: Vec<String> = (0..1000).map(|i| format!("customer-{i:08}")).collect();
    let mut g = c.benchmark_group("partitioner");
    g.throughput(Throughput::Elements(keys.len() as u64));
    g.bench_function("murmur2 1000 keys % 12", |b| {
        b.iter(|| keys.iter().map(|k| partition_for_key(k.as_bytes(), 12)).sum::<u32>())
    });
    g.finish();
}

criterion_group!(benches, codec, partitioner);
criterion_main!(benches);
