//! `sluice_commit_conflicts_total` counts the commit writes that failed a condition: a
//! process whose cached heads went stale retries, and says so.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use metrics::{Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use sluice_conformance::memory::memory;
use sluice_conformance::Backend;
use sluice_core::metrics::COMMIT_CONFLICTS;
use sluice_core::{Log, LogConfig, NewEvent, SystemClock, TopicSpec};

/// Counters by name and labels; everything else dropped.
#[derive(Default)]
struct Counters(Mutex<BTreeMap<String, Arc<Count>>>);

#[derive(Default)]
struct Count(AtomicU64);

impl CounterFn for Count {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }

    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
}

impl Counters {
    fn get(&self, name: &str) -> u64 {
        self.0.lock().unwrap().get(name).map_or(0, |c| c.0.load(Ordering::SeqCst))
    }
}

impl Recorder for Counters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        Counter::from_arc(self.0.lock().unwrap().entry(name).or_default().clone())
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn event(partition: u32) -> NewEvent {
    NewEvent {
        key: None,
        headers: Vec::new(),
        value: Bytes::from_static(b"x"),
        value_is_json: false,
        timestamp_ms: None,
        partition: Some(partition),
    }
}

#[test]
fn given_stale_cached_heads_when_publish_then_one_condition_conflict_counted() {
    let counters = Counters::default();
    // The committer is a task of this one thread's runtime, so the thread's recorder sees it.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    metrics::with_local_recorder(&counters, || {
        runtime.block_on(async {
            let backend = memory().await;
            let config = LogConfig { topic_cache_ttl: Duration::from_secs(600), ..LogConfig::default() };
            let open = || async { backend.open().await };
            let (store, objects) = open().await;
            let stale = Log::new(store, objects, Arc::new(SystemClock), config.clone());
            let (store, objects) = open().await;
            let other = Log::new(store, objects, Arc::new(SystemClock), config);
            let spec = TopicSpec { partitions: 4, retention_ms: None, retention_bytes: None };
            other.create_topic("conflicts", spec).await.unwrap();
            stale.publish("conflicts", (0..4).map(event).collect(), None).await.unwrap();
            other.publish("conflicts", (0..4).map(event).collect(), None).await.unwrap();
            stale.publish("conflicts", (0..4).map(event).collect(), None).await.unwrap();
        })
    });
    let condition = format!("{COMMIT_CONFLICTS}{{reason=condition}}");
    assert_eq!(counters.get(&condition), 1, "one failed write over four stale heads");
    assert_eq!(counters.get(&format!("{COMMIT_CONFLICTS}{{reason=refused}}")), 0);
}
