//! What push delivery costs per message, and a sweep with nothing due.

use super::*;

/// Acknowledges every delivery, as a healthy webhook does.
struct AckAll;

#[async_trait::async_trait]
impl sluice_core::ports::deliver::Deliver for AckAll {
    async fn deliver(&self, _: &sluice_core::ports::deliver::Delivery) -> sluice_core::ports::deliver::Answer {
        sluice_core::ports::deliver::Answer::Status { status: 200, retry_after_ms: None, body: b"{}".to_vec() }
    }
}

#[tokio::test]
async fn push_requests_per_message_are_what_the_cost_model_says() {
    let _serial = ONE_AT_A_TIME.lock().await;
    use sluice_core::push::{Dispatcher, Topics};
    use sluice_core::queues::{PushSpec, Queues, StartAt, SubscriptionSpec};
    let (state, objects, log) = counted_log().await;
    let queues = Queues::new(log.clone());
    let dispatcher = Dispatcher::new(queues.clone(), Arc::new(AckAll));
    // 50 a partition: batches of 10 fill, as a backlog fills them.
    const EVENTS: usize = 400;
    for batch in [1u32, 10, 100] {
        let topic = unique_topic("push-costs");
        log.create_topic(&topic, TopicSpec { partitions: 8, retention_ms: None, retention_bytes: None }).await.unwrap();
        let push = PushSpec { max_batch: batch, ..PushSpec::url("https://example.com/hook", None) };
        let spec = SubscriptionSpec { start: StartAt::Earliest, push: Some(push), ..SubscriptionSpec::default() };
        queues.create(&topic, "hook", spec).await.unwrap();
        log.publish(&topic, (0..EVENTS).map(|i| kib_event(i, true)).collect(), None).await.unwrap();
        let id = log.describe_topic(&topic).await.unwrap().0.id;
        // One wake from the stream, as a batch of commits sends it: every event delivered.
        let wake = Topics::Ids([id].into());
        // (moto answers slowly: a deadline no delivery reaches here, as a Lambda run's would not.)
        let deadline = || SystemClock.now_ms() + 600_000;
        let (drained, counts) = counted!(state, objects, dispatcher.drain(&wake, deadline()).await.unwrap());
        assert_eq!(drained.messages, EVENTS as u64, "{drained:?}");
        per_request(&format!("push, batch {batch}, per message"), &counts, EVENTS);
        let sent: u64 = requests(&counts).values().sum();
        // Per receive: the subscription, cursors and leases of the partitions it visits
        // (reads), one write carrying the previous batch's acks, the segments' bytes; per
        // wake the topic list, the subscriptions, the run lease's claim and release, the
        // workers' empty receives and the counts. (Counted: 6.7–7.03, 0.94–0.97 and 0.40; with
        // the acks on their own, 8.4, 1.34 and 0.39. The workers race for partitions, so how
        // many receives come back empty, and how many acks ride, moves from run to run: the
        // bounds leave that room and still catch a receive's worth more per batch.)
        let most = match batch {
            1 => 7.5,
            10 => 1.1,
            _ => 0.5,
        };
        assert!(sent as f64 <= most * EVENTS as f64, "{sent} requests for {EVENTS} messages: {counts:?}");
    }
    // A sweep with nothing due: what the schedule costs while nothing is published (it
    // would stay for what comes due within its minute; nothing does).
    let now = SystemClock.now_ms();
    let (drained, sweep) = counted!(state, objects, dispatcher.sweep(&Topics::All, now + 117_000, now + 60_000).await);
    drained.unwrap();
    per_request("push sweep, nothing due", &sweep, 1);
    // It looks without claiming anything (no run lease is written when nothing is due).
    assert_eq!(sweep.get(WRITE_UNITS).copied().unwrap_or(0), 0, "an idle sweep wrote: {sweep:?}");
}

/// A secret's rotation: the subscription read, then its record rewritten (no cursor is
/// touched, whatever the partitions).
#[tokio::test]
async fn rotating_a_push_secret_is_one_write_of_the_record() {
    let _serial = ONE_AT_A_TIME.lock().await;
    use sluice_core::queues::{PushSpec, Queues, SecretRotation, SubscriptionSpec};
    let (state, objects, log) = counted_log().await;
    let queues = Queues::new(log.clone());
    let topic = unique_topic("push-rotate");
    log.create_topic(&topic, TopicSpec { partitions: 8, retention_ms: None, retention_bytes: None }).await.unwrap();
    let spec = SubscriptionSpec { push: Some(PushSpec::url("https://example.com/hook", None)), ..Default::default() };
    queues.create(&topic, "hook", spec).await.unwrap();
    let rotation = SecretRotation::default();
    let (_, counts) = counted!(state, objects, queues.rotate_secret(&topic, "hook", &rotation).await.unwrap());
    per_request("rotate push secret (8 partitions)", &counts, 1);
    let writes = ["dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:TransactWriteItems"]
        .iter()
        .map(|op| counts.get(*op).copied().unwrap_or_default())
        .sum::<u64>();
    assert_eq!(writes, 1, "the record alone is written: {counts:?}");
    assert!(!counts.contains_key("dynamodb:Query"), "no partition is read: {counts:?}");
}
