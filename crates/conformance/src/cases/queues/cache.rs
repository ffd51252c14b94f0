//! Queues that cache subscriptions (`serve`'s): a cached subscription deleted, re-created
//! or left without its topic by another process never has a write act on it, and a request
//! that finds it so goes again on a fresh read. Time passes on a [`ManualClock`].

use std::sync::Arc;

use sluice_core::queues::{Message, PushSpec, Queues, ReceiptError, StartAt, SubscriptionSpec};
use sluice_core::{Code, Error, Log, LogConfig, ManualClock};

use crate::cases::support::queues::{ack, new_topic, positions, publish_at, receive, request, spec, START_MS};
use crate::Backend;

/// A process whose queues cache subscriptions, and another process on the same storage.
async fn two_processes(backend: &dyn Backend) -> (Arc<ManualClock>, Log, Queues, Log, Queues) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut logs = Vec::new();
    for _ in 0..2 {
        let (store, objects) = backend.open_with(clock.clone()).await;
        logs.push(Log::new(store, objects, clock.clone(), crate::log_config()));
    }
    let (other_log, log) = (logs.pop().unwrap(), logs.pop().unwrap());
    let (cached, other) = (Queues::caching_subscriptions(log.clone()), Queues::new(other_log.clone()));
    (clock, log, cached, other_log, other)
}

/// Subscription `s`, made by the other process on a new topic of `count` messages, cached
/// by the caching process's receive of one message (returned) and then deleted elsewhere.
async fn cached_then_deleted_elsewhere(
    backend: &dyn Backend,
    prefix: &str,
    count: usize,
) -> (Queues, Queues, String, Vec<Message>) {
    let (_clock, log, cached, _, other) = two_processes(backend).await;
    let topic = new_topic(&log, prefix, 1).await;
    other.create(&topic, "s", settings()).await.unwrap();
    for i in 0..count {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    let old = receive(&cached, &topic, "s", 1).await;
    assert_eq!(old.len(), 1, "the receive that caches it");
    other.delete(&topic, "s").await.unwrap();
    (cached, other, topic, old)
}

fn settings() -> SubscriptionSpec {
    SubscriptionSpec { visibility_timeout_ms: 60_000, ..spec(StartAt::Earliest) }
}

fn is_not_found<T: std::fmt::Debug>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(Error::SubscriptionNotFound { .. } | Error::TopicNotFound(_)))
}

pub async fn given_a_cached_subscription_deleted_elsewhere_then_no_write_acts_on_it(backend: &dyn Backend) {
    let (_clock, log, acker, _, other) = two_processes(backend).await;
    let receiver = Queues::caching_subscriptions(log.clone());
    let topic = new_topic(&log, "cached-del", 1).await;
    other.create(&topic, "s", settings()).await.unwrap();
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    // Each process's receive caches the subscription.
    let held = receive(&acker, &topic, "s", 1).await;
    assert_eq!(positions(&held), vec![(0, 0)]);
    assert_eq!(positions(&receive(&receiver, &topic, "s", 1).await), vec![(0, 1)]);

    other.delete(&topic, "s").await.unwrap();
    // Within the cache's lifetime, with a message waiting: the take's write finds out.
    let got = receiver.receive(&topic, "s", &request(10)).await;
    assert!(is_not_found(&got), "a receive on a deleted subscription: {got:?}");
    // The lease stays until the janitor purges it: the ack's write finds out too.
    let acked = acker.ack(&topic, "s", &[held[0].receipt.clone()]).await;
    assert!(is_not_found(&acked), "an ack on a deleted subscription: {acked:?}");
}

pub async fn given_a_cached_subscription_re_created_elsewhere_then_requests_go_to_the_new_one(backend: &dyn Backend) {
    let (cached, other, topic, old) = cached_then_deleted_elsewhere(backend, "cached-new", 4).await;
    other.create(&topic, "s", settings()).await.unwrap();
    // Receipts of the new subscription, acked through the stale entry: they name a
    // subscription the entry does not know, so the ack reads it again.
    let by_other = receive(&other, &topic, "s", 2).await;
    assert_eq!(positions(&by_other), vec![(0, 0), (0, 1)], "the new subscription starts over");
    for m in &by_other {
        assert_eq!(ack(&cached, &topic, "s", &m.receipt).await, Ok(()), "a receipt of the new subscription");
    }
    // The old subscription's receipt means nothing to the new one.
    assert!(ack(&cached, &topic, "s", &old[0].receipt).await.is_err());
    let rest = receive(&cached, &topic, "s", 10).await;
    assert_eq!(positions(&rest), vec![(0, 2), (0, 3)], "the new subscription's, each once");
    assert!(rest.iter().all(|m| m.receive_count == 1));
}

pub async fn given_a_cached_subscription_re_created_elsewhere_then_acks_riding_on_its_receive_are_invalid(
    backend: &dyn Backend,
) {
    let (cached, other, topic, old) = cached_then_deleted_elsewhere(backend, "cached-riding", 3).await;
    other.create(&topic, "s", settings()).await.unwrap();
    // Checked against the stale entry, the receipt looks like this subscription's; the
    // take's write finds the entry stale and the request goes again on the new one, to
    // which the receipt is another subscription's, as a plain ack answers.
    let (acks, got) = cached.ack_and_receive(&topic, "s", &[old[0].receipt.clone()], &request(10)).await.unwrap();
    assert_eq!(acks, vec![Err(ReceiptError::Invalid)], "a receipt of the subscription deleted");
    assert_eq!(positions(&got), vec![(0, 0), (0, 1), (0, 2)], "the new subscription starts over");
    assert_eq!(ack(&cached, &topic, "s", &old[0].receipt).await, Err(ReceiptError::Invalid));
}

pub async fn given_a_cached_subscriptions_topic_deleted_elsewhere_then_no_write_acts_on_it(backend: &dyn Backend) {
    let (_clock, log, acker, other_log, _) = two_processes(backend).await;
    let receiver = Queues::caching_subscriptions(log.clone());
    let topic = new_topic(&log, "cached-topic", 1).await;
    acker.create(&topic, "s", settings()).await.unwrap();
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    let held = receive(&acker, &topic, "s", 1).await;
    assert_eq!(held.len(), 1);
    assert_eq!(receive(&receiver, &topic, "s", 1).await.len(), 1);

    other_log.delete_topic(&topic).await.unwrap();
    let got = receiver.receive(&topic, "s", &request(10)).await;
    assert!(is_not_found(&got), "a receive on a deleted topic: {got:?}");
    let acked = acker.ack(&topic, "s", &[held[0].receipt.clone()]).await;
    assert!(is_not_found(&acked), "an ack on a deleted topic: {acked:?}");
}

pub async fn given_a_cached_subscription_deleted_elsewhere_then_an_empty_receive_finds_out_within_the_ttl(
    backend: &dyn Backend,
) {
    let (clock, log, cached, _, other) = two_processes(backend).await;
    let topic = new_topic(&log, "cached-ttl", 1).await;
    other.create(&topic, "s", settings()).await.unwrap();
    assert!(receive(&cached, &topic, "s", 10).await.is_empty());
    other.delete(&topic, "s").await.unwrap();
    // An empty receive writes nothing, so nothing checks the entry until it is read again:
    // at the latest once the log's topic cache lifetime (1 s by default) has passed.
    clock.advance(LogConfig::default().topic_cache_ttl.as_millis() as i64);
    let got = cached.receive(&topic, "s", &request(10)).await;
    assert!(is_not_found(&got), "{got:?}");
}

pub async fn given_a_cached_subscription_re_created_elsewhere_as_push_then_a_client_cannot_receive(
    backend: &dyn Backend,
) {
    let (cached, other, topic, _) = cached_then_deleted_elsewhere(backend, "cached-push", 3).await;
    let push = SubscriptionSpec { push: Some(PushSpec::url("https://receiver.test/hook", None)), ..settings() };
    other.create(&topic, "s", push).await.unwrap();
    // The cached entry says pull; its write finds it stale, and the fresh read says push.
    let got = cached.receive(&topic, "s", &request(10)).await;
    assert!(matches!(&got, Err(Error::Conflict { code: Code::PushSubscription, .. })), "{got:?}");
}
