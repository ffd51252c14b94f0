//! A work queue: one subscription over the topic, fed by a paced publisher (`--rate`
//! events/s, in publishes of 100 events to one partition each, through the API), drained
//! by `--clients` workers, each receiving up to `--batch` messages through the queues
//! function and sending the previous batch's acks riding on its next receive. The
//! latency is each receive's; the throughput, messages received per second.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::queues::{ReceiveRequest, StartAt, SubscriptionSpec};

use crate::rng::Rng;
use crate::scale::lambda::{Function, Route};
use crate::scale::report::{ScaleArgs, Tally};
use crate::scale::{Rig, TOPIC};

use super::{event, feed_with, retryable, WAIT_MS};

pub(crate) const SUB: &str = "q";

pub(crate) async fn run(rig: &Rig, args: &ScaleArgs, tally: Arc<Tally>) {
    let spec = SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() };
    let admin = sluice_core::queues::Queues::new(rig.admin.clone());
    admin.create(TOPIC, SUB, spec).await.expect("create the subscription");
    let end_ms = args.seconds as f64 * 1000.0;
    let feeder = tokio::spawn(feed_with(rig.platform.clone(), args.clone(), end_ms, |p, _| event(p)));
    let mut workers = Vec::new();
    for w in 0..args.clients {
        let (platform, tally, batch) = (rig.platform.clone(), tally.clone(), args.batch as usize);
        let mut rng = Rng::new(args.seed ^ (u64::from(w) + 7).wrapping_mul(0x2545_f491));
        workers.push(tokio::spawn(async move {
            let mut receipts: Vec<String> = Vec::new();
            while platform.cloud.now_ms() < end_ms {
                let began = platform.cloud.now_ms();
                let acks = std::mem::take(&mut receipts);
                let acks_back = acks.clone();
                let req = ReceiveRequest { max_messages: batch, wait_ms: WAIT_MS, visibility_timeout_ms: None };
                let answer = platform
                    .call(Route::QueueReceive, Function::Consume, |i| async move {
                        i.queues.ack_and_receive(TOPIC, SUB, &acks, &req).await
                    })
                    .await;
                let now = platform.cloud.now_ms();
                match answer {
                    Ok(Ok((_, messages))) => {
                        tally.ok(now - began, messages.len() as u64, now <= end_ms);
                        receipts = messages.into_iter().map(|m| m.receipt).collect();
                    }
                    Ok(Err(e)) if !retryable(&e) => {
                        platform.cloud.trace(began, "queue receive", &format!("error {e:?}"));
                        tally.error();
                    }
                    // Throttled (429, or 503 with Retry-After): the client's backoff, then
                    // again (its acks with it).
                    _ => {
                        receipts = acks_back;
                        tokio::time::sleep(Duration::from_millis(100 + rng.below(100))).await
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a worker");
    }
    feeder.await.expect("the feeder");
}
