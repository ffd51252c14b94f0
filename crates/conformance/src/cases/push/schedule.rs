//! Scheduled events on a push subscription: nothing is pushed before its time, what is due
//! is pushed past it, and the scheduled one is pushed once its time comes.

use std::sync::Arc;

use serde_json::{json, Value};
use sluice_core::push::{webhook, Dispatcher, Topics, WAKE_STAYS_MS};
use sluice_core::queues::PushSpec;
use sluice_core::schedule::stamp;
use sluice_core::Clock;

use super::receiver::*;
use crate::cases::support::clock::WatchedClock;
use crate::cases::support::queues::{
    manual, new_topic, publish, queues_on, scaled, subscribe, REAL_PATIENCE, START_MS,
};
use crate::Backend;

pub async fn given_a_scheduled_event_on_a_push_subscription_then_it_is_pushed_at_its_time_and_not_before(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-sched", 1).await;
    subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 5, 100)).await;
    let due_at = clock.now_ms() + 30_000;
    let mut later = json_event(json!("later"), None);
    stamp(&mut later, due_at);
    let at = publish(&log, &topic, vec![later, json_event(json!("now"), None)]).await;
    let id = |i: usize| webhook::message_id(&topic, at[i].partition, at[i].offset);
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    for _ in 0..29 {
        dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
        clock.advance(1_000);
    }
    clock.advance(999);
    dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
    assert_eq!(receiver.acked(), [id(1)].into(), "1 ms before its time: only the due one pushed");
    clock.advance(1);
    dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
    assert_eq!(receiver.acked(), [id(0), id(1)].into(), "pushed at its time");
    let items: Vec<_> = receiver.attempts().iter().flat_map(|a| a.items.clone()).collect();
    assert_eq!(items.len(), 2, "each pushed once: {items:?}");
}

/// A topic of one partition, quiet after one message scheduled for `due_at` was published
/// to its push subscription (a function target, `max_in_flight` 5, batches of 100), with a
/// receiver that takes every batch.
struct Quiet {
    clock: Arc<WatchedClock>,
    log: sluice_core::Log,
    queues: sluice_core::queues::Queues,
    topic: String,
    at: Vec<sluice_core::Position>,
    receiver: Arc<Receiver>,
    topics: Topics,
}

async fn quiet(backend: &dyn Backend, prefix: &str, due_at: i64) -> Quiet {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, prefix, 1).await;
    subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 5, 100)).await;
    let mut event = json_event(json!("scheduled"), None);
    stamp(&mut event, due_at);
    let at = publish(&log, &topic, vec![event]).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let topics = Topics::Named(vec![topic.clone()]);
    Quiet { clock, log, queues, topic, at, receiver, topics }
}

/// A quiet topic on AWS: no publish wakes a run when a scheduled message comes due, so the
/// sweep (every minute) stays for what comes due before the next one and pushes it at its
/// time. Here the run that moved it (a stream run: the publish's) ends with it not yet due,
/// the next sweep starts 60 s later, and the message is due 30 s after that.
pub async fn given_a_quiet_topic_when_a_scheduled_message_comes_due_then_the_staying_sweep_pushes_it_at_its_time(
    backend: &dyn Backend,
) {
    let due_at = START_MS + 90_000;
    let Quiet { clock, queues, topic, at, receiver, topics, .. } = quiet(backend, "push-quiet", due_at).await;
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let stream_run = dispatcher.drain(&topics, clock.now_ms() + 57_000).await.expect("the publish's run");
    assert_eq!(stream_run.deliveries, 0, "not due: nothing pushed");
    clock.clock.advance(60_000);
    let before = clock.sleeps();
    let sweep = {
        let (dispatcher, topics, now) = (dispatcher.clone(), topics.clone(), clock.now_ms());
        tokio::spawn(async move { dispatcher.sweep(&topics, now + 117_000, now + 60_000).await })
    };
    clock.slept_more_than(before).await;
    clock.clock.advance(29_999);
    tokio::task::yield_now().await;
    assert!(receiver.attempts().is_empty(), "1 ms before its time: nothing pushed");
    assert!(!sweep.is_finished(), "the sweep stays for it");
    clock.clock.advance(1);
    let swept = tokio::time::timeout(REAL_PATIENCE, sweep).await.expect("the sweep ended").unwrap().expect("sweep");
    assert_eq!(swept.deliveries, 1, "{swept:?}");
    assert_eq!(receiver.acked(), [webhook::message_id(&topic, at[0].partition, at[0].offset)].into());
    assert_eq!(clock.now_ms(), due_at, "pushed at its time, the clock not moved past it");
}

/// A sweep stays only for what comes due before it hands over: a message due after
/// `stay_until` (or whose attempt would end past the deadline) is left to the next sweep,
/// which the sweep answers at once instead of waiting for it.
pub async fn given_a_scheduled_message_due_after_the_sweeps_stay_then_the_sweep_ends_without_waiting(
    backend: &dyn Backend,
) {
    let Quiet { clock, queues, receiver, topics, .. } = quiet(backend, "push-far", START_MS + 61_000).await;
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    dispatcher.drain(&topics, START_MS + 57_000).await.expect("the publish's run");
    let before = clock.sleeps();
    let swept = dispatcher.sweep(&topics, START_MS + 117_000, START_MS + 60_000).await.expect("sweep");
    assert_eq!((swept.deliveries, clock.sleeps()), (0, before), "due after the stay: not waited for");
    // Due within the stay but its attempt (timeout 10 s + 5 s) would end past the deadline.
    let swept = dispatcher.sweep(&topics, START_MS + 70_000, START_MS + 120_000).await.expect("sweep");
    assert_eq!((swept.deliveries, clock.sleeps()), (0, before), "no time for its attempt: not waited for");
}

/// A message scheduled to come due before the next sweep starts, on a quiet topic: the
/// stream run that moved it cannot stay (its shard's next wakes would wait for it), so it
/// hands the time over (on AWS: the dispatcher function invoked for it), once however many
/// stream runs see it, and the run so woken pushes it at its time.
pub async fn given_a_message_due_before_the_next_sweep_then_the_stream_run_hands_it_over_and_it_is_pushed_at_its_time(
    backend: &dyn Backend,
) {
    let due_at = START_MS + 20_000;
    let Quiet { clock, log, queues, topic, at, receiver, topics } = quiet(backend, "push-soon", due_at).await;
    let asked = Arc::new(Asked::default());
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone()).with_wakes(asked.clone());
    assert_eq!(dispatcher.drain(&topics, START_MS + 57_000).await.expect("the publish's run").deliveries, 0);
    assert_eq!(*asked.0.lock().unwrap(), [(vec![topic.clone()], due_at)], "handed over for its time");
    let now = publish(&log, &topic, vec![json_event(json!("now"), None)]).await;
    assert_eq!(dispatcher.drain(&topics, START_MS + 57_000).await.expect("the next publish's run").deliveries, 1);
    assert_eq!(asked.0.lock().unwrap().len(), 1, "handed over once");
    let id = |p: &sluice_core::Position| webhook::message_id(&topic, p.partition, p.offset);
    // The run the wake starts, as the dispatcher function runs it.
    let before = clock.sleeps();
    let woken = {
        let (dispatcher, topics) = (dispatcher.clone(), topics.clone());
        tokio::spawn(async move { dispatcher.sweep(&topics, START_MS + 117_000, due_at + WAKE_STAYS_MS).await })
    };
    clock.slept_more_than(before).await;
    clock.clock.advance(19_999);
    tokio::task::yield_now().await;
    assert_eq!(receiver.acked(), [id(&now[0])].into(), "1 ms before its time: not pushed");
    clock.clock.advance(1);
    let run = tokio::time::timeout(REAL_PATIENCE, woken).await.expect("the woken run ended").unwrap().expect("run");
    assert_eq!(run.deliveries, 1, "{run:?}");
    assert_eq!(receiver.acked(), [id(&now[0]), id(&at[0])].into(), "pushed at its time");
    assert_eq!(clock.now_ms(), due_at);
}

/// Thousands due at the same time on a quiet topic: the staying sweep pushes them all at
/// that time, in batches of at most `max_batch`, and a message of another partition due a
/// moment later is pushed at its own time, not held back behind them.
pub async fn given_thousands_due_at_once_on_a_quiet_topic_then_pushed_at_their_time_in_bounded_batches(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "push-many", 2).await;
    let push = PushSpec { max_batch: 10, ..PushSpec::lambda("consumer") };
    subscribe(&queues, &topic, push_spec(push, 5, 100)).await;
    let (n, due_at) = (scaled(backend, 2_000), START_MS + 90_000);
    let scheduled = |value: Value, partition: u32, at: i64| {
        let mut e = json_event(value, None);
        e.partition = Some(partition);
        stamp(&mut e, at);
        e
    };
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        publish(&log, &topic, chunk.iter().map(|i| scheduled(json!(i), 0, due_at)).collect()).await;
    }
    let after = publish(&log, &topic, vec![scheduled(json!("after"), 1, due_at + 1)]).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    assert_eq!(dispatcher.drain(&topics, START_MS + 57_000).await.expect("the publishes' run").deliveries, 0);
    clock.clock.advance(60_000);
    let before = clock.sleeps();
    let sweep = {
        let (dispatcher, topics, now) = (dispatcher.clone(), topics.clone(), clock.now_ms());
        tokio::spawn(async move { dispatcher.sweep(&topics, now + 117_000, now + 60_000).await })
    };
    clock.slept_more_than(before).await;
    clock.clock.advance(29_999);
    tokio::task::yield_now().await;
    assert!(receiver.attempts().is_empty(), "1 ms before their time: nothing pushed");
    clock.clock.advance(1);
    let pushed = tokio::time::timeout(REAL_PATIENCE, async {
        while receiver.acked().len() < n {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    });
    pushed.await.unwrap_or_else(|_| panic!("{} of {n} pushed at their time", receiver.acked().len()));
    let last = webhook::message_id(&topic, after[0].partition, after[0].offset);
    assert!(!receiver.acked().contains(&last), "the later one not before its time");
    clock.clock.advance(1);
    let swept = tokio::time::timeout(REAL_PATIENCE, sweep).await.expect("the sweep ended").unwrap().expect("sweep");
    assert_eq!((swept.messages, receiver.acked().len()), (n as u64 + 1, n + 1), "each pushed once");
    let batches: Vec<usize> = receiver.attempts().iter().map(|a| a.items.len()).collect();
    assert!(batches.iter().all(|b| (1..=10).contains(b)), "batches of at most max_batch: {batches:?}");
    assert_eq!(clock.now_ms(), due_at + 1);
}

/// `sluice serve`'s dispatcher (its workers long-poll): a scheduled message published while
/// they wait is moved aside by the receive the commit wakes, which then naps until its time
/// and pushes it at that instant.
pub async fn given_a_running_dispatcher_when_a_scheduled_message_comes_due_then_it_is_pushed_at_that_instant(
    backend: &dyn Backend,
) {
    let clock = Arc::new(WatchedClock::new(START_MS));
    let (log, queues) = queues_on(backend, clock.clone()).await;
    let topic = new_topic(&log, "push-serve-sched", 1).await;
    subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 5, 100)).await;
    let receiver = Receiver::new(|_, _| ok(json!({})));
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let topics = Topics::Named(vec![topic.clone()]);
    let before = clock.sleeps();
    let running = tokio::spawn(async move { dispatcher.run_on(&topics, stopping).await });
    clock.slept_more_than(before + 1).await; // the scan's pause and a worker's long poll
    let mut later = json_event(json!("later"), None);
    stamp(&mut later, START_MS + 3_000);
    let woken = clock.sleeps();
    let at = publish(&log, &topic, vec![later]).await;
    clock.slept_more_than(woken).await;
    clock.clock.advance(2_999);
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert!(receiver.attempts().is_empty(), "1 ms before its time: nothing pushed");
    clock.clock.advance(1);
    let id = webhook::message_id(&topic, at[0].partition, at[0].offset);
    let pushed = tokio::time::timeout(REAL_PATIENCE, async {
        while !receiver.acked().contains(&id) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    });
    pushed.await.expect("pushed at its time, the clock not moved past it");
    assert_eq!(clock.now_ms(), START_MS + 3_000);
    stop.send(true).unwrap();
    tokio::time::timeout(REAL_PATIENCE, running).await.expect("stopped").unwrap();
}
