//! What scheduled delivery costs: the receive that moves scheduled messages out of the
//! way, a receive of them once due, and describe counting them.

use sluice_core::queues::{Queues, ReceiveRequest, StartAt, SubscriptionSpec};
use sluice_core::schedule::stamp;
use sluice_core::ManualClock;

use super::*;

fn receive(max_messages: usize) -> ReceiveRequest {
    ReceiveRequest { max_messages, wait_ms: 0, visibility_timeout_ms: None }
}

#[tokio::test]
async fn scheduled_message_requests_are_what_the_cost_model_says() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let (state, objects, log) = counted_log_on(clock.clone()).await;
    let topic = unique_topic("schedule-costs");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    let queues = Queues::new(log.clone());
    let spec = SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() };
    queues.create(&topic, "work", spec).await.unwrap();
    // The receipt key is read (or made) once per process: a first message received and acked.
    log.publish(&topic, vec![kib_event(0, false)], None).await.unwrap();
    let first = queues.receive(&topic, "work", &receive(10)).await.unwrap();
    queues.ack(&topic, "work", &first.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>()).await.unwrap();
    // 100 events scheduled an hour out (one publish), then one due.
    let due_at = clock.now_ms() + 3_600_000;
    let mut events: Vec<NewEvent> = (0..100).map(|i| kib_event(i, false)).collect();
    events.iter_mut().for_each(|e| stamp(e, due_at));
    events.push(kib_event(100, false));
    events.iter_mut().for_each(|e| e.partition = Some(0));
    log.publish(&topic, events, None).await.unwrap();
    let (got, moved) = counted!(state, objects, queues.receive(&topic, "work", &receive(10)).await.unwrap());
    per_request("queue receive passing 100 scheduled messages, delivering the 1 due", &moved, 1);
    assert_eq!(got.len(), 1, "only the due one");
    let (d, described) = counted!(state, objects, queues.describe(&topic, "work").await.unwrap());
    per_request("describe subscription, 100 scheduled in one lease item", &described, 1);
    assert_eq!(d.backlog.scheduled, 100);
    clock.advance(3_600_000);
    let (got, due) = counted!(state, objects, queues.receive(&topic, "work", &receive(10)).await.unwrap());
    per_request("queue receive, batch 10 of 100 scheduled messages come due", &due, 1);
    assert_eq!(got.len(), 10);
}
