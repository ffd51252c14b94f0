//! Pause and resume: a paused subscription counts what the log gives it, delivers nothing
//! (a long poll waits as on an empty queue), settles what is already out, and delivers it
//! all once resumed; no receive that starts after a pause has answered grants a lease,
//! whatever a process caches. Time passes on a [`ManualClock`](sluice_core::ManualClock).

use std::collections::BTreeSet;
use std::sync::Arc;

use sluice_core::queues::{Message, Queues, ReceiveRequest, StartAt, SubscriptionSpec, SubscriptionState};
use sluice_core::{Clock, Error, Log, ManualClock};

use crate::cases::support::clock::WatchedClock;
use crate::cases::support::queues::*;
use crate::cases::support::race::receives_racing;
use crate::Backend;

fn settings() -> SubscriptionSpec {
    SubscriptionSpec { visibility_timeout_ms: 60_000, ..spec(StartAt::Earliest) }
}

async fn state(queues: &Queues, topic: &str, sub: &str) -> SubscriptionState {
    queues.describe(topic, sub).await.expect("describe").subscription.state
}

pub async fn given_a_paused_subscription_then_it_counts_new_messages_delivers_none_settles_what_is_out_and_resume_delivers_them(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "paused", 2).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    for i in 0..3 {
        publish_at(&log, &topic, 0, &format!("m{i}"), START_MS).await;
    }
    let held = receive(&queues, &topic, &sub, 2).await;
    assert_eq!(positions(&held), vec![(0, 0), (0, 1)], "leased before the pause");

    let paused = queues.pause(&topic, &sub).await.expect("pause");
    assert_eq!(paused.state, SubscriptionState::Paused);
    assert_eq!(queues.pause(&topic, &sub).await.expect("pause again"), paused, "idempotent: unchanged");
    for i in 0..2 {
        publish_at(&log, &topic, 1, &format!("n{i}"), START_MS).await;
    }
    assert_eq!(state(&queues, &topic, &sub).await, SubscriptionState::Paused);
    assert_eq!(backlog(&queues, &topic, &sub).await, [3, 2, 0, 0], "the backlog grows, counted exactly");
    assert_nothing(&queues, &topic, &sub, "paused").await;

    // What is out still settles: an ack riding on a receive, a hold, a nack.
    let (acks, got) = queues
        .ack_and_receive(&topic, &sub, std::slice::from_ref(&held[0].receipt), &request(10))
        .await
        .expect("ack and receive");
    assert_eq!(acks, vec![Ok(())], "an ack riding on a paused receive is written");
    assert!(got.is_empty(), "and the receive takes nothing");
    let renewed = change_visibility(&queues, &topic, &sub, &held[1].receipt, 120_000).await.expect("hold longer");
    assert_eq!(nack(&queues, &topic, &sub, &renewed, 0).await, Ok(()));
    assert_eq!(backlog(&queues, &topic, &sub).await, [4, 0, 0, 0], "acked one, released one");
    clock.advance(200_000);
    assert_nothing(&queues, &topic, &sub, "paused, however long").await;

    let resumed = queues.resume(&topic, &sub).await.expect("resume");
    assert_eq!(resumed.state, SubscriptionState::Active);
    assert_eq!(queues.resume(&topic, &sub).await.expect("resume again"), resumed, "idempotent: unchanged");
    let got: BTreeSet<(u32, u64)> = positions(&receive(&queues, &topic, &sub, 10).await).into_iter().collect();
    assert_eq!(got, BTreeSet::from([(0, 1), (0, 2), (1, 0), (1, 1)]), "all of it, once resumed");
    assert!(!got.contains(&(0, 0)), "the message acked while paused never comes back");
}

pub async fn given_pause_or_resume_of_an_unknown_or_deleted_subscription_then_not_found(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "pause-404", 1).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    queues.delete(&topic, &sub).await.unwrap();
    for (t, s) in [("no-such-topic", "s"), (topic.as_str(), "no-such-sub"), (topic.as_str(), sub.as_str())] {
        for result in [queues.pause(t, s).await, queues.resume(t, s).await] {
            assert!(
                matches!(result, Err(Error::TopicNotFound(_) | Error::SubscriptionNotFound { .. })),
                "{t}/{s}: {result:?}"
            );
        }
    }
}

fn long_poll(queues: &Queues, topic: &str, sub: &str, wait_ms: u64) -> tokio::task::JoinHandle<Vec<Message>> {
    let (queues, topic, sub) = (queues.clone(), topic.to_owned(), sub.to_owned());
    let req = ReceiveRequest { max_messages: 10, wait_ms, visibility_timeout_ms: None };
    tokio::spawn(async move { queues.receive(&topic, &sub, &req).await.expect("receive") })
}

async fn finished(waiting: tokio::task::JoinHandle<Vec<Message>>) -> Vec<Message> {
    tokio::time::timeout(REAL_PATIENCE, waiting).await.expect("the long poll ended").unwrap()
}

pub async fn given_a_paused_subscription_then_a_long_poll_ends_empty_at_its_wait_and_one_waiting_is_woken_by_resume(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "paused-wait", 1).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    let pos = publish_at(&log, &topic, 0, "waiting", START_MS).await;
    queues.pause(&topic, &sub).await.expect("pause");

    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 5_000);
    clock.slept_more_than(before).await;
    clock.clock.advance(4_999);
    for _ in 0..5 {
        tokio::task::yield_now().await;
        queues.describe(&topic, &sub).await.expect("describe");
    }
    assert!(!waiting.is_finished(), "a paused queue's long poll waits out its wait_ms");
    clock.clock.advance(1);
    assert!(finished(waiting).await.is_empty(), "and ends empty, with a message in the log");

    let before = clock.sleeps();
    let waiting = long_poll(&queues, &topic, &sub, 20_000);
    clock.slept_more_than(before).await;
    queues.resume(&topic, &sub).await.expect("resume");
    let got = finished(waiting).await;
    assert_eq!(positions(&got), vec![pos], "woken by the resume");
    assert_eq!(clock.now_ms(), START_MS + 5_000, "without the clock moving");
}

pub async fn given_a_cached_subscription_paused_elsewhere_then_no_receive_after_the_pause_grants_a_lease(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut logs = Vec::new();
    for _ in 0..2 {
        let (store, objects) = backend.open_with(clock.clone()).await;
        logs.push(Log::new(store, objects, clock.clone(), crate::log_config()));
    }
    let (cached, other) = (Queues::caching_subscriptions(logs[0].clone()), Queues::new(logs[1].clone()));
    let topic = new_topic(&logs[0], "paused-cached", 2).await;
    other.create(&topic, "s", settings()).await.unwrap();
    for i in 0..4 {
        publish_at(&logs[0], &topic, i % 2, &format!("m{i}"), START_MS).await;
    }
    let first = receive(&cached, &topic, "s", 1).await;
    assert_eq!(first.len(), 1, "the receive that caches the subscription as active");

    other.pause(&topic, "s").await.expect("pause elsewhere");
    // Within the cache's lifetime: the cursors say paused, whatever the cache says.
    assert_nothing(&cached, &topic, "s", "a process that cached the subscription active").await;
    assert_eq!(ack(&cached, &topic, "s", &first[0].receipt).await, Ok(()), "acks still work");

    other.resume(&topic, "s").await.expect("resume elsewhere");
    assert_eq!(receive(&cached, &topic, "s", 10).await.len(), 3, "the rest, once resumed");
}

/// Receives racing a pause (`receives_racing`).
pub async fn given_receives_racing_a_pause_then_none_that_started_after_its_answer_grants_a_lease(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "pause-race", 4).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    let total = scaled(backend, 400).max(80);
    publish(&log, &topic, (0..total).map(|i| event(format!("m{i}"), Some(i as u32 % 4), None, None)).collect()).await;
    let race = receives_racing(&log, &topic, &sub, total, async {
        queues.pause(&topic, &sub).await.expect("pause");
    })
    .await;
    let at_answer = race.at_answer;
    assert!(at_answer < total, "messages were left to take after the pause answered");

    let late = positions(&race.late);
    assert!(late.is_empty(), "receives started after the pause answered were granted {late:?}");
    let taken = race.taken as u64;
    let d = queues.describe(&topic, &sub).await.expect("describe");
    assert_eq!((d.backlog.in_flight, d.backlog.visible), (taken, total as u64 - taken), "each once, the rest waiting");
    assert_eq!(d.subscription.state, SubscriptionState::Paused);
}
