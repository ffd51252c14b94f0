//! The workloads: clients driving the deployment as the shapes describe.

mod group;
mod publish;
mod push;
mod queue;

use std::sync::Arc;

use bytes::Bytes;
use sluice_core::NewEvent;

use super::lambda::Platform;
use super::report::{ScaleArgs, Tally, Workload};
use super::Rig;
use crate::rng::Rng;

/// Every event's value: 1 KiB, as docs/AWS.md's cost model prices.
pub(crate) const VALUE_BYTES: usize = 1024;

pub(crate) fn event(partition: u32) -> NewEvent {
    NewEvent {
        key: None,
        headers: Vec::new(),
        value: Bytes::from(vec![b'x'; VALUE_BYTES]),
        value_is_json: false,
        timestamp_ms: None,
        partition: Some(partition),
    }
}

/// How long a receive or a poll waits for its first message ⚠ (a worker's choice).
pub(crate) const WAIT_MS: u64 = 1000;
/// Whether a client sends a request again after this answer: the store's refusal, which
/// the API answers as a 503 with `Retry-After` (a conflict counts in `conflicts` already).
pub(crate) fn retryable(e: &sluice_core::Error) -> bool {
    matches!(e, sluice_core::Error::Throttled(_))
}

/// Events per publish of a paced feeder.
const FEED_BATCH: u32 = 100;

/// Publishes `--rate` events a second until `end_ms`, through the API, as publishes of
/// [`FEED_BATCH`] events (made by `make`) to one partition each (round-robin), each sent
/// on its own schedule whether or not the ones before it have been answered.
pub(crate) async fn feed_with<M>(platform: Arc<Platform>, args: ScaleArgs, end_ms: f64, make: M)
where
    M: Fn(u32, &mut Rng) -> NewEvent + Clone + Send + 'static,
{
    if args.rate <= 0.0 {
        return;
    }
    let batch = FEED_BATCH.min(args.rate.ceil() as u32).max(1);
    let every_ms = f64::from(batch) * 1000.0 / args.rate;
    let mut rng = Rng::new(args.seed ^ 0xfeed);
    let mut sent = Vec::new();
    let mut n = 0u64;
    while platform.cloud.now_ms() < end_ms {
        let partition = (n % u64::from(args.partitions)) as u32;
        let events: Vec<NewEvent> = (0..batch).map(|_| make(partition, &mut rng)).collect();
        let (sender, mut rng) = (platform.clone(), rng.fork());
        sent.push(tokio::spawn(async move { publish::publish(&sender, &mut rng, events).await }));
        n += 1;
        platform_wait(&platform, n as f64 * every_ms).await;
    }
    for s in sent {
        let _ = s.await;
    }
}

/// Waits until `at_ms` of the run.
async fn platform_wait(platform: &Platform, at_ms: f64) {
    let now = platform.cloud.now_ms();
    platform.cloud.wait(at_ms - now).await;
}

pub(crate) async fn run(rig: &Rig, args: &ScaleArgs, tally: Arc<Tally>) {
    match args.workload {
        Workload::Publish => publish::run(rig, args, tally).await,
        Workload::Queue => queue::run(rig, args, tally).await,
        Workload::Group => group::run(rig, args, tally).await,
        Workload::Push => push::run(rig, args, tally).await,
    }
}
