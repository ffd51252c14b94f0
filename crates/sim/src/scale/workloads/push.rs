//! Push as deployed: `--subscriptions` push subscriptions, each with a filter matching its
//! share of the events, fed by a paced publisher (`--rate` events/s); the table's stream
//! read by an event source mapping (polled every 250 ms, batched for `--window-ms`, 100
//! records at most, one batch at a time per shard: one shard modelled) that invokes the
//! dispatcher function (unreserved, as template.yaml's default) with the topics whose heads moved; the
//! dispatcher runs the core's `Dispatcher::drain`, delivering to a receiver that answers
//! in `--receiver-ms`. The latency is publish-to-delivery per message (from the time the
//! log accepted the event); the throughput, messages delivered per second.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::ports::deliver::{Answer, Deliver, Delivery};
use sluice_core::push::{Dispatcher, Topics};
use sluice_core::queues::{PushSpec, Rate, StartAt, SubscriptionSpec};
use sluice_core::NewEvent;

use crate::rng::Rng;
use crate::scale::cloud::{Cloud, T0};
use crate::scale::dynamo::Dynamo;
use crate::scale::lambda::{Function, Platform};
use crate::scale::params;
use crate::scale::report::{ScaleArgs, Tally};
use crate::scale::{Rig, TOPIC};

use super::{feed_with, VALUE_BYTES};

/// The dispatcher function's timeout (template.yaml) and what its main keeps back.
const DISPATCHER_TIMEOUT_MS: i64 = 60_000;
const DISPATCHER_RESERVE_MS: i64 = 3_000;
/// Records in one batch of the mapping (template.yaml's `BatchSize`).
const ESM_BATCH: usize = 100;
/// How long after the run the mapping keeps delivering, so late messages count in the
/// latency (not in the throughput).
const GRACE_MS: f64 = 5_000.0;

/// A JSON event for subscription `kind`'s filter, about 1 KiB.
fn push_event(partition: u32, kind: u32) -> NewEvent {
    let pad = "x".repeat(VALUE_BYTES - 40);
    NewEvent {
        key: None,
        headers: Vec::new(),
        value: Bytes::from(format!(r#"{{"kind":"k{kind}","pad":"{pad}"}}"#)),
        value_is_json: true,
        timestamp_ms: None,
        partition: Some(partition),
    }
}

/// The receiver: answers every delivery 200 after `ms`, and tallies each message's
/// publish-to-delivery time.
struct Receiver {
    cloud: Arc<Cloud>,
    tally: Arc<Tally>,
    ms: f64,
    end_ms: f64,
}

#[async_trait]
impl Deliver for Receiver {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        self.cloud.wait(self.ms).await;
        let now = self.cloud.now_ms();
        let body: serde_json::Value = serde_json::from_slice(&delivery.body).unwrap_or_default();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        for m in &messages {
            let published = m["timestamp_ms"].as_i64().unwrap_or(T0) - T0;
            self.tally.ok(now - published as f64, 1, now <= self.end_ms);
        }
        Answer::Status { status: 200, retry_after_ms: None, body: Vec::new() }
    }
}

async fn subscribe(rig: &Rig, args: &ScaleArgs) {
    let queues = sluice_core::queues::Queues::new(rig.admin.clone());
    for k in 0..args.subscriptions {
        let mut push = PushSpec::url(format!("https://receiver.example/{k}"), None);
        push.max_in_flight = args.max_in_flight;
        let filter = serde_json::json!({ "value": { "kind": [format!("k{k}")] } });
        let rate = args.sub_rate.map(|per_second| Rate { per_second, burst: per_second });
        let spec = SubscriptionSpec {
            start: StartAt::Earliest,
            filter: Some(filter),
            push: Some(push),
            rate,
            ..Default::default()
        };
        queues.create(TOPIC, &format!("push{k}"), spec).await.expect("create a push subscription");
    }
}

/// The event source mapping on one shard: waits for records, batches them for the
/// window, invokes the dispatcher with the topics they name and waits for it (a throttled
/// invoke is retried), then the next batch.
async fn mapping(platform: Arc<Platform>, dynamo: Arc<Dynamo>, receiver: Arc<Receiver>, window_ms: u64, stop_ms: f64) {
    let mut read = 0;
    while platform.cloud.now_ms() < stop_ms {
        platform.cloud.wait(params::ESM_POLL_MS as f64).await;
        if dynamo.stream.lock().unwrap().len() == read {
            continue;
        }
        let opened = platform.cloud.now_ms();
        while platform.cloud.now_ms() - opened < window_ms as f64
            && dynamo.stream.lock().unwrap().len() - read < ESM_BATCH
        {
            platform.cloud.wait(params::ESM_POLL_MS as f64).await;
        }
        let pks: Vec<String> = {
            let stream = dynamo.stream.lock().unwrap();
            let upto = stream.len().min(read + ESM_BATCH);
            let batch = stream[read..upto].to_vec();
            read = upto;
            batch
        };
        let topics = Topics::of_changed(pks.iter().map(String::as_str));
        loop {
            let (topics, receiver) = (topics.clone(), receiver.clone());
            let run = platform
                .invoke(Function::Dispatcher, |i| async move {
                    let dispatcher = Dispatcher::new(i.queues.clone(), receiver);
                    let now = i.log.clock().now_ms();
                    dispatcher.drain(&topics, now + DISPATCHER_TIMEOUT_MS - DISPATCHER_RESERVE_MS).await
                })
                .await;
            if let Ok(drained) = run {
                platform.cloud.trace(platform.cloud.now_ms(), "dispatcher drained", &format!("{drained:?}"));
                break;
            }
            platform.cloud.wait(1000.0).await;
        }
    }
}

pub(crate) async fn run(rig: &Rig, args: &ScaleArgs, tally: Arc<Tally>) {
    subscribe(rig, args).await;
    let end_ms = args.seconds as f64 * 1000.0;
    let receiver = Arc::new(Receiver { cloud: rig.cloud.clone(), tally, ms: args.receiver_ms, end_ms });
    let kinds = args.subscriptions.max(1);
    let make = move |partition: u32, rng: &mut Rng| push_event(partition, rng.below(u64::from(kinds)) as u32);
    let feeder = tokio::spawn(feed_with(rig.platform.clone(), args.clone(), end_ms, make));
    let esm = mapping(rig.platform.clone(), rig.dynamo.clone(), receiver, args.window_ms, end_ms + GRACE_MS);
    esm.await;
    feeder.await.expect("the feeder");
}
