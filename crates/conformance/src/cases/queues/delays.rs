//! Delivery delays and redelivery backoff.

use sluice_core::queues::{Backoff, Queues, StartAt, SubscriptionSpec};
use sluice_core::ManualClock;

use crate::cases::support::queues::*;
use crate::Backend;

pub async fn given_delay_then_new_messages_visible_at_their_timestamp_plus_delay_and_not_before(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "delay", 2).await;
    let sub_spec = SubscriptionSpec { delay_ms: 10_000, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let now_stamped = publish_at(&log, &topic, 0, "now", START_MS).await;
    let old_stamped = publish_at(&log, &topic, 1, "old", START_MS - 4_000).await;

    assert_nothing(&queues, &topic, &sub, "within the delay").await;
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 2, 0], "both delayed");
    clock.advance(5_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the older one's timestamp + delay").await;
    clock.advance(1);
    let old = receive_one(&queues, &topic, &sub).await;
    assert_eq!(at(&old), old_stamped, "visible at its timestamp + delay");
    assert_eq!(ack(&queues, &topic, &sub, &old.receipt).await, Ok(()));
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 1, 0]);
    clock.advance(3_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the newer one's timestamp + delay").await;
    clock.advance(1);
    assert_eq!(at(&receive_one(&queues, &topic, &sub).await), now_stamped);
}

/// Timestamps are the publisher's: a later offset may carry an earlier time. Each message
/// is due at its own timestamp + delay, not behind an earlier offset's.
pub async fn given_out_of_order_timestamps_in_one_partition_when_delay_then_each_visible_at_its_own_time(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "skew", 1).await;
    let sub_spec = SubscriptionSpec { delay_ms: 10_000, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let late = publish_at(&log, &topic, 0, "stamped now", START_MS).await;
    let early = publish_at(&log, &topic, 0, "stamped 8 s ago", START_MS - 8_000).await;
    clock.advance(1_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before the earlier-stamped message is due").await;
    clock.advance(1);
    let first = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&first), vec![early], "offset 1 is due 8 s before offset 0");
    clock.advance(7_999);
    assert_nothing(&queues, &topic, &sub, "1 ms before offset 0 is due").await;
    clock.advance(1);
    assert_eq!(at(&receive_one(&queues, &topic, &sub).await), late);
}

/// A publisher's clock may run ahead. An event stamped an hour from now must not hold back
/// the events after it in its partition on a subscription without a delay, and describe's
/// visible count must be what a receive then gets.
pub async fn given_an_event_stamped_in_the_future_then_the_events_after_it_are_not_held_behind_it(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "ahead", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    publish_at(&log, &topic, 0, "from a clock an hour fast", START_MS + 3_600_000).await;
    let on_time = publish_at(&log, &topic, 0, "on time", START_MS).await;
    let visible = queues.describe(&topic, &sub).await.unwrap().backlog.visible;
    let got = receive(&queues, &topic, &sub, 10).await;
    assert!(
        positions(&got).contains(&on_time),
        "the on-time event is held behind the future-stamped one: received {:?}",
        positions(&got)
    );
    assert_eq!(got.len() as u64, visible, "describe's visible count is what a receive gets");
}

/// Never acks; after each delivery's hold runs out, checks the message is not back until
/// the expected wait has passed, and is back then.
async fn assert_redelivery_waits(
    clock: &ManualClock,
    queues: &Queues,
    topic: &str,
    sub: &str,
    visibility: u64,
    waits: &[u64],
    what: &str,
) {
    let first = receive_one(queues, topic, sub).await;
    assert_eq!(first.receive_count, 1);
    for (n, wait) in waits.iter().enumerate() {
        clock.advance((visibility + wait - 1) as i64);
        assert_eq!(
            backlog(queues, topic, sub).await,
            [0, 0, 1, 0],
            "{what}: redelivery {} of {wait} ms, 1 ms before it: in backoff, delayed",
            n + 1
        );
        assert_nothing(queues, topic, sub, &format!("{what}: 1 ms before redelivery {} (wait {wait} ms)", n + 1)).await;
        clock.advance(1);
        let m = receive_one(queues, topic, sub).await;
        assert_eq!(m.receive_count, n as u32 + 2, "{what}: redelivery {} after {wait} ms", n + 1);
    }
}

pub async fn given_redelivery_backoff_then_the_nth_redelivery_waits_the_nth_step(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "backoff", 1).await;
    publish_at(&log, &topic, 0, "flaky", START_MS).await;
    let base = SubscriptionSpec { visibility_timeout_ms: 1_000, max_receive_count: 10, ..spec(StartAt::Earliest) };

    let steps = Backoff::Steps(vec![2_000, 5_000, 9_000]);
    let sub = subscribe(&queues, &topic, SubscriptionSpec { redelivery_backoff: Some(steps), ..base.clone() }).await;
    assert_redelivery_waits(
        &clock,
        &queues,
        &topic,
        &sub,
        1_000,
        &[2_000, 5_000, 9_000, 9_000],
        "steps (the last repeats)",
    )
    .await;

    let exponential = Backoff::Exponential { initial_ms: 1_000, max_ms: 3_000, multiplier: 2 };
    let sub = subscribe(&queues, &topic, SubscriptionSpec { redelivery_backoff: Some(exponential), ..base }).await;
    assert_redelivery_waits(&clock, &queues, &topic, &sub, 1_000, &[1_000, 2_000, 3_000, 3_000], "exponential").await;
}
