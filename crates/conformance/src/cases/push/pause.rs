//! A paused push subscription: its dispatcher skips it, and one that listed it before the
//! pause takes nothing; resumed, everything is pushed.

use serde_json::json;
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::PushSpec;
use sluice_core::Clock;

use super::receiver::*;
use crate::cases::support::queues::{manual, new_topic, publish, subscribe};
use crate::Backend;

pub async fn given_a_paused_push_subscription_then_nothing_is_pushed_and_once_resumed_everything_is(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-paused", 2).await;
    let sub = subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 5, 100)).await;
    let at = publish(&log, &topic, (0..6).map(|i| json_event(json!(i), None)).collect()).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    let listed = dispatcher.subscriptions(&topics).await.unwrap().remove(0);

    queues.pause(&topic, &sub).await.expect("pause");
    assert!(dispatcher.subscriptions(&topics).await.unwrap().is_empty(), "the dispatcher skips it");
    assert!(dispatcher.receive(&listed, 0).await.unwrap().is_empty(), "listed before the pause: takes nothing");
    for _ in 0..3 {
        assert_eq!(dispatcher.drain(&topics, clock.now_ms() + 60_000).await.unwrap().deliveries, 0);
        clock.advance(10_000);
    }
    assert!(receiver.attempts().is_empty(), "a paused push subscription sends nothing");
    assert_eq!(queues.describe(&topic, &sub).await.unwrap().backlog.visible, 6, "all of it waiting");

    queues.resume(&topic, &sub).await.expect("resume");
    drain_all(&dispatcher, &clock, &topic, 100).await;
    let want: std::collections::HashSet<String> =
        at.iter().map(|p| webhook::message_id(&topic, p.partition, p.offset)).collect();
    assert_eq!(receiver.acked(), want, "every message pushed and acked once resumed");
}

/// Moves the clock in steps of `step` ms, letting the dispatcher's tasks run between them,
/// until `done` or the real patience runs out.
pub(super) async fn until(clock: &sluice_core::ManualClock, step: i64, done: impl Fn() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + crate::cases::support::queues::REAL_PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        clock.advance(step);
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    done()
}

/// Moves the clock `step` ms `n` times while another subscription of the running dispatcher
/// is held back; after each step publishes one event to `beat` (a topic the dispatcher also
/// serves, answered 2xx) and waits until it is delivered. Each delivery proves the dispatcher's
/// loop came round after that step: sleeps alone prove nothing on a slow machine.
pub(super) async fn beats(
    clock: &sluice_core::ManualClock,
    log: &sluice_core::Log,
    beat: &str,
    receiver: &Receiver,
    n: usize,
    step: i64,
) {
    for i in 0..n {
        clock.advance(step);
        let at = publish(log, beat, vec![json_event(json!(i), None)]).await;
        let id = webhook::message_id(beat, at[0].partition, at[0].offset);
        assert!(until(clock, 0, || receiver.acked().contains(&id)).await, "the dispatcher never came round: beat {i}");
    }
}

/// Attempts of `topic`'s messages only (a beat's are left out).
pub(super) fn attempts_of(receiver: &Receiver, topic: &str) -> Vec<Attempt> {
    let prefix = format!("{topic}/");
    receiver.attempts().into_iter().filter(|a| a.items.iter().any(|m| m.0.starts_with(&prefix))).collect()
}

pub async fn given_a_running_dispatcher_when_its_subscription_is_paused_then_nothing_is_pushed_until_resumed(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let (topic, beat) = (new_topic(&log, "push-run-paused", 1).await, new_topic(&log, "push-beat", 1).await);
    let push = PushSpec { max_in_flight: 2, ..PushSpec::lambda("consumer") };
    let sub = subscribe(&queues, &topic, push_spec(push.clone(), 5, 100)).await;
    subscribe(&queues, &beat, push_spec(push, 5, 100)).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let topics = Topics::Named(vec![topic.clone(), beat.clone()]);
    let running = tokio::spawn(async move { dispatcher.run_on(&topics, stopping).await });
    let first = publish(&log, &topic, vec![json_event(json!("before"), None)]).await;
    let id = |p: &sluice_core::Position| webhook::message_id(&topic, p.partition, p.offset);
    assert!(until(&clock, 100, || receiver.acked().contains(&id(&first[0]))).await, "pushed while active");

    queues.pause(&topic, &sub).await.expect("pause");
    let paused = publish(&log, &topic, (0..3).map(|i| json_event(json!(i), None)).collect()).await;
    // Idle waits end and scans come round many times over (each beat delivered proves one):
    // nothing more is pushed.
    beats(&clock, &log, &beat, &receiver, 30, 1_000).await;
    assert_eq!(attempts_of(&receiver, &topic).len(), 1, "nothing pushed while paused");

    queues.resume(&topic, &sub).await.expect("resume");
    let all = || paused.iter().all(|p| receiver.acked().contains(&id(p)));
    assert!(until(&clock, 100, all).await, "every message pushed once resumed");
    stop.send(true).unwrap();
    clock.advance(10_000);
    tokio::time::timeout(crate::cases::support::queues::REAL_PATIENCE, running).await.expect("stopped").unwrap();
}
