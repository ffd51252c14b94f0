//! A consumer group draining a backlog: `--rate` × `--seconds` events written to the
//! topic before the run (straight to the stores, unmetered, in commits of 500 events per
//! partition), then `--clients` members polling up to 500 events each through the groups
//! function, each poll committing the previous one's positions (`auto_commit`). The
//! throughput is events polled per second; the latency, each poll's.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::groups::{PollRequest, ResetPolicy};

use crate::rng::Rng;
use crate::scale::lambda::{Function, Route};
use crate::scale::report::{ScaleArgs, Tally};
use crate::scale::{Rig, TOPIC};

use super::{event, retryable, WAIT_MS};

const POLL_EVENTS: usize = 500;
const GROUP: &str = "g";

/// Writes the backlog: `total` events, round-robin over the partitions in commits of 500.
async fn backlog(rig: &Rig, partitions: u32, total: u64) {
    let mut written = 0u64;
    let mut p = 0u32;
    while written < total {
        let n = (total - written).min(POLL_EVENTS as u64);
        let events = (0..n).map(|_| event(p)).collect();
        rig.admin.publish(TOPIC, events, None).await.expect("write the backlog");
        written += n;
        p = (p + 1) % partitions;
    }
}

pub(crate) async fn run(rig: &Rig, args: &ScaleArgs, tally: Arc<Tally>) {
    backlog(rig, args.partitions, (args.rate * args.seconds as f64) as u64).await;
    let started = rig.cloud.now_ms();
    let end_ms = started + args.seconds as f64 * 1000.0;
    let mut members = Vec::new();
    for m in 0..args.clients {
        let (platform, tally) = (rig.platform.clone(), tally.clone());
        let mut rng = Rng::new(args.seed ^ (u64::from(m) + 11).wrapping_mul(0x5851_f42d));
        members.push(tokio::spawn(async move {
            let mut member_id = None;
            while platform.cloud.now_ms() < end_ms {
                let began = platform.cloud.now_ms();
                let req = PollRequest {
                    group: GROUP.into(),
                    member_id: member_id.clone(),
                    topics: vec![TOPIC.into()],
                    max_events: POLL_EVENTS,
                    max_bytes: 5 << 20,
                    wait_ms: WAIT_MS,
                    reset: ResetPolicy::Earliest,
                    session_timeout_ms: None,
                    auto_commit: true,
                    positions: None,
                    instance_id: Some(format!("m{m}")),
                };
                let answer = platform
                    .call(Route::GroupPoll, Function::Consume, |i| async move { i.groups.poll(&req).await })
                    .await;
                let now = platform.cloud.now_ms();
                match answer {
                    Ok(Ok(a)) => {
                        tally.ok(now - began, a.events.len() as u64, now <= end_ms);
                        member_id = Some(a.member_id);
                    }
                    Ok(Err(e)) if !retryable(&e) => {
                        platform.cloud.trace(began, "group poll", &format!("error {e:?}"));
                        tally.error();
                    }
                    // Throttled (429, or 503 with Retry-After): the client's backoff, then again.
                    _ => tokio::time::sleep(Duration::from_millis(100 + rng.below(100))).await,
                }
            }
        }));
    }
    for member in members {
        member.await.expect("a member");
    }
}
