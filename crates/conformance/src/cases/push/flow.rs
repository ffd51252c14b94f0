//! Push flow control and endpoint health (`sluice_core::push::flow`): a `Retry-After` holds
//! back the whole subscription and nothing is received meanwhile (no receive count spent);
//! a 429, a 503 or a timeout halves the in-flight limit and each success adds one back; an
//! endpoint failing 20 times over 5 minutes is suspended, probed once a minute, and resumed
//! by the first success; a pause wins over a suspension.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::json;
use sluice_core::ports::deliver::Answer;
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::{FlowRecord, PushSpec, Queues, SeekTo, SubscriptionState};
use sluice_core::Clock;

use super::receiver::*;
use crate::cases::support::queues::{manual, new_topic, publish, subscribe};
use crate::Backend;

/// The flow state describe shows (as last flushed by a dispatcher).
async fn flow(queues: &Queues, topic: &str, sub: &str) -> FlowRecord {
    let d = queues.describe(topic, sub).await.expect("describe");
    d.deliveries.and_then(|d| d.flow).unwrap_or_default()
}

pub async fn given_a_receiver_answering_429_with_retry_after_then_nothing_is_received_until_then_and_the_limit_halves_then_recovers(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-flow-429", 4).await;
    let push = PushSpec { max_batch: 1, max_in_flight: 8, ..PushSpec::lambda("consumer") };
    // Three receives each: a message received while it waits would soon be dead-lettered.
    let sub = subscribe(&queues, &topic, push_spec(push, 3, 100)).await;
    let at = publish(&log, &topic, (0..24).map(|i| json_event(json!(i), None)).collect()).await;
    let t0 = clock.now_ms();
    let until = t0 + 30_000;
    let c = clock.clone();
    let receiver =
        Receiver::new(move |_, _| if c.now_ms() < until { status(429, Some(30_000)) } else { ok(json!({})) });
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);

    dispatcher.drain(&topics, t0 + 60_000).await.expect("drain");
    let throttled = receiver.attempts().len();
    assert!((1..=8).contains(&throttled), "{throttled} attempts before the first 429 was answered");
    let f = flow(&queues, &topic, &sub).await;
    assert_eq!(f.not_before_ms, Some(until), "Retry-After holds back the whole subscription");
    let limit = f.limit(8);
    assert!(limit <= 4, "a 429 halves the limit: {limit}");
    // Until Retry-After has passed: nothing sent, nothing received.
    for _ in 0..29 {
        clock.advance(1_000);
        assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0);
    }
    assert_eq!(receiver.attempts().len(), throttled, "a delivery was attempted before Retry-After");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.in_flight, d.backlog.dead), (0, 0), "nothing held or dead-lettered while waiting");

    clock.advance(1_000);
    drain_all(&dispatcher, &clock, &topic, 100).await;
    let attempts = receiver.attempts();
    for (i, a) in attempts[throttled..].iter().enumerate() {
        let counts: Vec<u32> = a.items.iter().map(|m| m.2).collect();
        assert!(counts.iter().all(|c| *c <= 2), "a receive count was spent while waiting: {counts:?}");
        // Each success adds one to the limit: never more out than it allowed.
        assert!(a.out <= (limit as usize + i).min(8), "attempt {i} after the wait had {} out (limit {limit})", a.out);
    }
    let want: std::collections::HashSet<String> =
        at.iter().map(|p| webhook::message_id(&topic, p.partition, p.offset)).collect();
    assert_eq!(receiver.acked(), want, "every message delivered once Retry-After passed");
    assert_eq!(queues.describe(&topic, &sub).await.unwrap().backlog.dead, 0);
    assert_eq!(flow(&queues, &topic, &sub).await.limit(8), 8, "successes grow the limit back to its ceiling");
}

pub async fn given_503s_and_timeouts_then_the_in_flight_limit_halves_down_to_one_and_a_success_adds_one(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-flow-halve", 1).await;
    let push = PushSpec { max_in_flight: 8, ..PushSpec::lambda("consumer") };
    let sub = subscribe(&queues, &topic, push_spec(push, 100, 100)).await;
    publish(&log, &topic, vec![json_event(json!(1), None)]).await;
    let receiver = Receiver::new(|_, n| match n {
        0 | 1 => status(503, None),
        2 => Answer::TimedOut,
        3 => status(500, None),
        _ => ok(json!({})),
    });
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    let mut limits = Vec::new();
    for _ in 0..5 {
        dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
        limits.push(flow(&queues, &topic, &sub).await.limit(8));
        clock.advance(1_000);
    }
    assert_eq!(receiver.attempts().len(), 5);
    // 503, 503, timeout: halved each time; a 500 leaves it; a 2xx adds one.
    assert_eq!(limits, vec![4, 2, 1, 1, 2]);
}

pub async fn given_an_endpoint_failing_twenty_times_over_five_minutes_then_it_is_suspended_probed_once_a_minute_and_resumed(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-suspend", 1).await;
    let sub = subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 1000, 1_000)).await;
    let at = publish(&log, &topic, (0..3).map(|i| json_event(json!(i), None)).collect()).await;
    let healthy = Arc::new(AtomicBool::new(false));
    let h = healthy.clone();
    let receiver = Receiver::new(move |_, _| if h.load(Ordering::SeqCst) { ok(json!({})) } else { status(500, None) });
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    let drain = || async { dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain") };
    let state = || async { queues.describe(&topic, &sub).await.unwrap().subscription.state };

    // One failed attempt every 20 s: the 20th comes 380 s after the first.
    for i in 0..20 {
        assert_eq!(state().await, SubscriptionState::Active, "suspended after {i} failures");
        drain().await;
        clock.advance(20_000);
    }
    assert_eq!(receiver.attempts().len(), 20);
    assert_eq!(state().await, SubscriptionState::Suspended);
    let since = flow(&queues, &topic, &sub).await.suspended_since_ms.expect("suspended_since_ms");
    assert_eq!(since, clock.now_ms() - 20_000, "suspended at its 20th failure");
    // Suspended: one probe batch a minute (drained every 10 s for 5 minutes).
    for _ in 0..30 {
        drain().await;
        clock.advance(10_000);
    }
    let probes = receiver.attempts().len() - 20;
    assert!((4..=5).contains(&probes), "{probes} probes in 5 minutes");
    // A pause wins (nothing is sent, describe says paused); a resume leaves it suspended.
    queues.pause(&topic, &sub).await.unwrap();
    assert_eq!(state().await, SubscriptionState::Paused);
    for _ in 0..12 {
        drain().await;
        clock.advance(10_000);
    }
    assert_eq!(receiver.attempts().len() - 20, probes, "a paused subscription sends no probe");
    queues.resume(&topic, &sub).await.unwrap();
    assert_eq!(state().await, SubscriptionState::Suspended, "a resume lifts the pause, not the suspension");
    // The endpoint recovers: the next probe is delivered and resumes it.
    healthy.store(true, Ordering::SeqCst);
    drain_all(&dispatcher, &clock, &topic, 10_000).await;
    assert_eq!(state().await, SubscriptionState::Active);
    assert_eq!(flow(&queues, &topic, &sub).await.suspended_since_ms, None);
    let want: std::collections::HashSet<String> =
        at.iter().map(|p| webhook::message_id(&topic, p.partition, p.offset)).collect();
    assert_eq!(receiver.acked(), want, "every message delivered once it resumed");
}

pub async fn given_a_target_answering_410_gone_then_its_batch_is_dead_lettered_at_once_with_reason_gone(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-gone", 2).await;
    // A batch of 50: more than one dead-lettering write's worth.
    let push = PushSpec { max_batch: 50, ..PushSpec::lambda("consumer") };
    let sub = subscribe(&queues, &topic, push_spec(push, 5, 100)).await;
    let at = publish(&log, &topic, (0..60).map(|i| json_event(json!(i), None)).collect()).await;
    let receiver = Receiver::new(|_, n| if n == 0 { status(410, None) } else { ok(json!({})) });
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    drain_all(&dispatcher, &clock, &topic, 100).await;
    let attempts = receiver.attempts();
    let gone: std::collections::HashSet<String> = attempts[0].items.iter().map(|m| m.0.clone()).collect();
    assert!(gone.len() > 40, "the first batch held {} messages", gone.len());
    assert!(
        attempts[1..].iter().all(|a| a.items.iter().all(|m| !gone.contains(&m.0))),
        "a gone message was pushed again"
    );
    let page = queues.dead_letters(&topic, &sub, None, 100).await.expect("dead letters");
    let dead: std::collections::HashSet<String> =
        page.entries.iter().map(|d| webhook::message_id(&topic, d.partition, d.offset)).collect();
    assert_eq!(dead, gone, "the 410's batch, and it alone, is in the DLQ");
    assert!(page.entries.iter().all(|d| d.reason == "gone" && d.receive_count == 1), "{:?}", page.entries[0]);
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.dead, d.backlog.visible, d.backlog.in_flight), (gone.len() as u64, 0, 0));
    let all: std::collections::HashSet<String> =
        at.iter().map(|p| webhook::message_id(&topic, p.partition, p.offset)).collect();
    let delivered: std::collections::HashSet<String> = receiver.acked().difference(&gone).cloned().collect();
    assert_eq!(delivered.len() + gone.len(), all.len(), "the others delivered");
}

/// A seek back delivers a dead-lettered message again (its dead letter kept); a second 410
/// dead-letters it again: the letter there is kept, counted once, and the partition goes on.
pub async fn given_a_gone_message_sought_back_over_when_gone_again_then_its_dead_letter_is_kept_once(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-gone-again", 1).await;
    let push = PushSpec { max_batch: 1, ..PushSpec::lambda("consumer") };
    let sub = subscribe(&queues, &topic, push_spec(push, 5, 100)).await;
    publish(&log, &topic, vec![json_event(json!("gone"), None)]).await;
    let receiver = Receiver::new(|_, n| if n < 2 { status(410, None) } else { ok(json!({})) });
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    drain_all(&dispatcher, &clock, &topic, 100).await;
    queues.seek(&topic, &sub, &SeekTo::Earliest, false).await.expect("seek back");
    publish(&log, &topic, vec![json_event(json!("next"), None)]).await;
    drain_all(&dispatcher, &clock, &topic, 100).await;

    let attempts = receiver.attempts();
    assert_eq!(attempts.len(), 3, "gone, gone again after the seek, then the next message: {attempts:?}");
    let page = queues.dead_letters(&topic, &sub, None, 100).await.expect("dead letters");
    assert_eq!(page.entries.iter().map(|d| d.offset).collect::<Vec<_>>(), vec![0], "one dead letter");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!((d.backlog.dead, d.backlog.visible, d.backlog.in_flight), (1, 0, 0), "counted once");
}

pub async fn given_a_running_dispatcher_and_a_429_with_retry_after_then_nothing_is_received_until_then(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let (topic, beat) = (new_topic(&log, "push-run-429", 2).await, new_topic(&log, "push-beat", 1).await);
    let push = PushSpec { max_batch: 1, max_in_flight: 4, ..PushSpec::lambda("consumer") };
    let sub = subscribe(&queues, &topic, push_spec(push.clone(), 3, 100)).await;
    subscribe(&queues, &beat, push_spec(push, 3, 100)).await;
    let until_ms = clock.now_ms() + 30_000;
    let (c, throttled_id) = (clock.clone(), format!("{topic}/"));
    let receiver = Receiver::new(move |body, _| {
        let throttled = items(body).iter().any(|m| m.0.starts_with(&throttled_id));
        if throttled && c.now_ms() < until_ms {
            status(429, Some(30_000))
        } else {
            ok(json!({}))
        }
    });
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let topics = Topics::Named(vec![topic.clone(), beat.clone()]);
    let running = tokio::spawn(async move { dispatcher.run_on(&topics, stopping).await });
    let at = publish(&log, &topic, (0..8).map(|i| json_event(json!(i), None)).collect()).await;
    assert!(super::pause::until(&clock, 0, || !receiver.attempts().is_empty()).await, "nothing pushed");
    // Idle waits end and scans come round many times over (each beat delivered proves one):
    // nothing is received until Retry-After, so only the batches already out when the first
    // 429 came are attempted (at most max_in_flight; on a slow store they may arrive after it).
    super::pause::beats(&clock, &log, &beat, &receiver, 25, 1_000).await;
    assert!(clock.now_ms() < until_ms, "the beats stayed inside the Retry-After");
    let throttled = super::pause::attempts_of(&receiver, &topic).len();
    assert!(throttled <= 4, "{throttled} attempts before Retry-After: more than were out at the first 429");
    assert_eq!(queues.describe(&topic, &sub).await.unwrap().backlog.dead, 0);

    let id = |p: &sluice_core::Position| webhook::message_id(&topic, p.partition, p.offset);
    let all = || at.iter().all(|p| receiver.acked().contains(&id(p)));
    assert!(super::pause::until(&clock, 100, all).await, "every message pushed once Retry-After passed");
    // Each message's first attempt answered 2xx, the one right after Retry-After: a count spent
    // while waiting shows there. A later attempt may carry one more, when the clock, stepped
    // while a slow store kept that first attempt in flight, ran its lease out.
    let mut first = std::collections::HashMap::new();
    for a in super::pause::attempts_of(&receiver, &topic).iter().filter(|a| a.failed.is_empty()) {
        for m in &a.items {
            first.entry(m.0.clone()).or_insert(m.2);
        }
    }
    let counts = first.values().max().copied();
    assert!(counts <= Some(2), "a receive count was spent while waiting: {counts:?}");
    stop.send(true).unwrap();
    clock.advance(10_000);
    tokio::time::timeout(crate::cases::support::queues::REAL_PATIENCE, running).await.expect("stopped").unwrap();
}
