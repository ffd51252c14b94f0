//! A subscription's rate: a burst, then exactly `per_second × t` messages over `t`; two
//! processes share one bucket; a message waiting for the rate spends no receive count; a
//! long poll waits for the next token; a PATCH adds and removes it. Time passes on a
//! manual clock, never by sleeping.

use std::sync::Arc;

use sluice_core::queues::{Queues, Rate, ReceiveRequest, StartAt, SubscriptionPatch, SubscriptionSpec};
use sluice_core::{Error, Log, ManualClock};

use crate::cases::support::clock::WatchedClock;
use crate::cases::support::queues::*;
use crate::Backend;

fn rated(per_second: u32, burst: u32) -> SubscriptionSpec {
    SubscriptionSpec {
        rate: Some(Rate { per_second, burst }),
        visibility_timeout_ms: 600_000,
        ..spec(StartAt::Earliest)
    }
}

async fn fill(log: &Log, topic: &str, partitions: u32, n: usize) {
    let events = (0..n).map(|i| event(format!("m{i}"), Some(i as u32 % partitions), None, Some(START_MS))).collect();
    publish(log, topic, events).await;
}

async fn throttled(queues: &Queues, topic: &str, sub: &str) -> Option<u64> {
    queues.describe(topic, sub).await.expect("describe").throttled_ms
}

pub async fn given_a_rate_then_a_burst_then_exactly_per_second_times_t_messages_over_t(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "rate-burst", 2).await;
    let sub = subscribe(&queues, &topic, rated(10, 5)).await;
    assert_nothing(&queues, &topic, &sub, "an empty queue").await;
    fill(&log, &topic, 2, 100).await;
    let burst = receive(&queues, &topic, &sub, 100).await.len();
    assert_eq!(burst, 5, "the burst: a full bucket at once (an empty queue's receive gave its tokens back)");
    assert_nothing(&queues, &topic, &sub, "the bucket is empty").await;
    assert_eq!(throttled(&queues, &topic, &sub).await, Some(0), "the wait for the next token is still ahead");
    // Every 250 ms, 2.5 tokens: fractions carry over, so 3 s give exactly 30 messages.
    let mut received = 0;
    for _ in 0..12 {
        clock.advance(250);
        received += receive(&queues, &topic, &sub, 100).await.len();
        received += receive(&queues, &topic, &sub, 100).await.len();
    }
    assert_eq!(received, 30, "10 a second over 3 s");
    assert_eq!(backlog(&queues, &topic, &sub).await, [65, 35, 0, 0], "nothing else was taken");
    // A quiet spell fills the bucket to its size, no more.
    clock.advance(60_000);
    assert_eq!(receive(&queues, &topic, &sub, 100).await.len(), 5, "at most the burst after a quiet spell");
    // The first empty receive at START_MS waited 100 ms for its token; each later one its own.
    let waited = throttled(&queues, &topic, &sub).await.expect("a rate: throttled time shown");
    assert!(waited >= 100, "throttled time counted: {waited} ms");
}

pub async fn given_a_rate_then_a_long_poll_waits_for_the_next_token(backend: &dyn Backend) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "rate-wait", 1).await;
    let sub = subscribe(&queues, &topic, rated(4, 1)).await;
    fill(&log, &topic, 1, 3).await;
    assert_eq!(receive(&queues, &topic, &sub, 10).await.len(), 1, "the burst");
    let before = clock.sleeps();
    let waiting = {
        let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
        let req = ReceiveRequest { max_messages: 10, wait_ms: 5_000, visibility_timeout_ms: None };
        tokio::spawn(async move { queues.receive(&topic, &sub, &req).await })
    };
    clock.slept_more_than(before).await;
    clock.clock.advance(249);
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    queues.describe(&topic, &sub).await.expect("describe");
    assert!(!waiting.is_finished(), "no token before 250 ms");
    clock.clock.advance(1);
    let got: Result<Vec<_>, Error> =
        tokio::time::timeout(REAL_PATIENCE, waiting).await.expect("the long poll ended").unwrap();
    assert_eq!(got.expect("receive").len(), 1, "woken by the next token, one message");
    assert_eq!(throttled(&queues, &topic, &sub).await, Some(250), "the wait is counted once");
}

pub async fn given_two_processes_on_one_rate_then_they_share_its_bucket(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut processes = Vec::new();
    for _ in 0..2 {
        let (store, objects) = backend.open_with(clock.clone()).await;
        let log = Log::new(store, objects, clock.clone(), crate::log_config());
        processes.push((log.clone(), Queues::new(log)));
    }
    let (log, a) = (processes[0].0.clone(), processes[0].1.clone());
    let b = processes[1].1.clone();
    let topic = new_topic(&log, "rate-shared", 2).await;
    let sub = subscribe(&a, &topic, rated(10, 10)).await;
    fill(&log, &topic, 2, 100).await;
    assert_eq!(receive(&a, &topic, &sub, 100).await.len(), 10, "one process takes the burst");
    assert_nothing(&b, &topic, &sub, "the other finds the bucket they share empty").await;
    let mut got = [0, 0];
    for _ in 0..10 {
        clock.advance(200);
        got[0] += receive(&a, &topic, &sub, 1).await.len();
        got[1] += receive(&b, &topic, &sub, 100).await.len();
    }
    assert_eq!(got[0] + got[1], 20, "two seconds at 10 a second, whoever receives: {got:?}");
    assert_eq!(got[0], 10, "one each 200 ms for the one asking first");
}

pub async fn given_a_throttled_subscription_then_waiting_messages_spend_no_receive_count(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "rate-counts", 1).await;
    let once = SubscriptionSpec { max_receive_count: 1, visibility_timeout_ms: 1_000, ..rated(1, 1) };
    let sub = subscribe(&queues, &topic, once).await;
    fill(&log, &topic, 1, 3).await;
    let first = receive_one(&queues, &topic, &sub).await;
    for _ in 0..10 {
        assert_nothing(&queues, &topic, &sub, "waiting for the rate").await;
    }
    assert_eq!(backlog(&queues, &topic, &sub).await, [2, 1, 0, 0], "no lease for a message waiting for the rate");
    clock.advance(1_000);
    let next = receive_one(&queues, &topic, &sub).await;
    assert_eq!(next.receive_count, 1, "its first delivery, however many receives waited");
    assert_ne!(at(&next), at(&first), "the first message, out of deliveries, went to the DLQ");
    assert_eq!(backlog(&queues, &topic, &sub).await, [1, 1, 0, 1]);
}

pub async fn given_a_patch_adding_and_removing_a_rate_then_receives_follow_it(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "rate-patch", 2).await;
    let sub =
        subscribe(&queues, &topic, SubscriptionSpec { visibility_timeout_ms: 600_000, ..spec(StartAt::Earliest) })
            .await;
    fill(&log, &topic, 2, 60).await;
    assert_eq!(throttled(&queues, &topic, &sub).await, None, "no rate, no throttled time");
    let limit = Rate { per_second: 3, burst: 2 };
    let patched = queues
        .patch(&topic, &sub, &SubscriptionPatch { rate: Some(Some(limit)), ..Default::default() })
        .await
        .expect("add a rate");
    assert_eq!(patched.spec.rate, Some(limit));
    let described = queues.describe(&topic, &sub).await.expect("describe");
    assert_eq!((described.subscription.spec.rate, described.throttled_ms), (Some(limit), Some(0)));
    assert_eq!(receive(&queues, &topic, &sub, 50).await.len(), 2, "the new rate's burst");
    assert_nothing(&queues, &topic, &sub, "the new rate holds").await;

    for bad in
        [Rate { per_second: 0, burst: 1 }, Rate { per_second: 10_001, burst: 1 }, Rate { per_second: 5, burst: 0 }]
    {
        let change = SubscriptionPatch { rate: Some(Some(bad)), ..Default::default() };
        match queues.patch(&topic, &sub, &change).await {
            Err(Error::Invalid { message, .. }) => assert!(message.starts_with("rate."), "{message}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert_eq!(queues.describe(&topic, &sub).await.unwrap().subscription.spec.rate, Some(limit), "nothing written");

    let removed = SubscriptionPatch { rate: Some(None), ..Default::default() };
    assert_eq!(queues.patch(&topic, &sub, &removed).await.expect("remove the rate").spec.rate, None);
    assert_eq!(receive(&queues, &topic, &sub, 50).await.len(), 50, "no limit again");
    let bad = SubscriptionSpec { rate: Some(Rate { per_second: 1, burst: 0 }), ..spec(StartAt::Earliest) };
    assert!(matches!(queues.create(&topic, "bad-rate", bad).await, Err(Error::Invalid { .. })), "create checks it");
}

/// Eight receivers on two processes at once, the clock standing still: together they get
/// the bucket's tokens, no more (each take of tokens is a conditional write).
pub async fn given_eight_receivers_racing_on_one_rate_then_together_they_get_exactly_the_burst(backend: &dyn Backend) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut logs = Vec::new();
    for _ in 0..2 {
        let (store, objects) = backend.open_with(clock.clone()).await;
        logs.push(Log::new(store, objects, clock.clone(), crate::log_config()));
    }
    let topic = new_topic(&logs[0], "rate-race", 4).await;
    let sub = subscribe(&Queues::new(logs[0].clone()), &topic, rated(100, 30)).await;
    fill(&logs[0], &topic, 4, 200).await;
    let mut receivers = tokio::task::JoinSet::new();
    for r in 0..8 {
        let queues = Queues::new(logs[r % 2].clone());
        let (topic, sub) = (topic.clone(), sub.clone());
        receivers.spawn(async move {
            let mut got = 0;
            for _ in 0..6 {
                got += receive(&queues, &topic, &sub, 2).await.len();
            }
            got
        });
    }
    let mut total = 0;
    while let Some(got) = receivers.join_next().await {
        total += got.expect("receiver");
    }
    assert_eq!(total, 30, "the burst, shared by every receiver");
}
