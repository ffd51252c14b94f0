//! Closed-loop publishers: each sends one request (one event, or `--batch` events for one
//! partition, or with `--keyed` spread over the partitions) through API Gateway to the publish function, waits for its answer, and sends
//! the next; partitions drawn uniformly. A throttled request (429) is sent again after the
//! client's backoff (sluice-client's policy: 100 ms doubling to 5 s, full jitter, 6
//! attempts); any other failure counts as an error.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::{Error, NewEvent, Position};

use crate::rng::Rng;
use crate::scale::lambda::{Function, Platform, Route};
use crate::scale::params;
use crate::scale::report::{ScaleArgs, Tally};
use crate::scale::{Rig, TOPIC};

use super::event;

const CLIENT_ATTEMPTS: u32 = 6;
const CLIENT_BACKOFF: sluice_core::retry::Backoff = sluice_core::retry::Backoff { base_ms: 100, cap_ms: 5000 };

/// One publish through the API, as the client sends it (429s sent again); `None` if it
/// was throttled on every attempt.
pub(crate) async fn publish(
    platform: &Platform,
    rng: &mut Rng,
    events: Vec<NewEvent>,
) -> Option<Result<Vec<Position>, Error>> {
    for attempt in 0..CLIENT_ATTEMPTS {
        let events = events.clone();
        let answer = platform
            .call(Route::Stage, Function::Publish, |instance| async move {
                let deadline = instance.log.clock().now_ms() + params::API_TIMEOUT_MS - params::ANSWER_RESERVE_MS;
                instance.log.publish_before(TOPIC, events, None, deadline).await
            })
            .await;
        match answer {
            Ok(answer) => return Some(answer),
            Err(_) => {
                let wait = CLIENT_BACKOFF.wait_ms(attempt, rng.next_u64());
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
        }
    }
    None
}

pub(crate) async fn run(rig: &Rig, args: &ScaleArgs, tally: Arc<Tally>) {
    let end_ms = args.seconds as f64 * 1000.0;
    let mut clients = Vec::new();
    for c in 0..args.clients {
        let (platform, tally) = (rig.platform.clone(), tally.clone());
        let (partitions, batch, keyed) = (args.partitions, args.batch, args.keyed);
        let mut rng = Rng::new(args.seed ^ (u64::from(c) + 1).wrapping_mul(0x9e37_79b9));
        clients.push(tokio::spawn(async move {
            while platform.cloud.now_ms() < end_ms {
                let began = platform.cloud.now_ms();
                let partition = rng.below(u64::from(partitions)) as u32;
                let events = (0..batch)
                    .map(|_| event(if keyed { rng.below(u64::from(partitions)) as u32 } else { partition }))
                    .collect();
                match publish(&platform, &mut rng, events).await {
                    Some(Ok(_)) => {
                        let now = platform.cloud.now_ms();
                        tally.ok(now - began, u64::from(batch), now <= end_ms);
                    }
                    Some(Err(_)) | None => tally.error(),
                }
            }
        }));
    }
    for client in clients {
        client.await.expect("a publisher");
    }
}
