//! Concurrent workers on one queue: exactly-once acks, ordering by key, backlog counts
//! against a model.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use sluice_core::queues::{Message, Ordering, Queues, ReceiptError, StartAt, SubscriptionSpec, MAX_RECEIVE_COUNT};
use sluice_core::{Clock, NewEvent};
use tokio::sync::Notify;

use crate::cases::support::queues::*;
use crate::Backend;

/// Eight workers, each receiving ten at a time and acking what it got, drain the queue.
/// The clock never moves, so no visibility timeout can run out: every message must be
/// delivered once, to one worker, and acked once.
pub async fn given_eight_workers_draining_a_queue_then_every_message_acked_exactly_once_and_backlog_ends_empty(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "drain", 4).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let total = scaled(backend, 10_000);
    let events = (0..total).map(|i| event(format!("m{i}"), Some(i as u32 % 4), None, None)).collect();
    let published: BTreeSet<(u32, u64)> =
        publish(&log, &topic, events).await.into_iter().map(|p| (p.partition, p.offset)).collect();
    assert_eq!(published.len(), total);

    let delivered = Arc::new(Mutex::new(HashMap::<(u32, u64), usize>::new()));
    let duplicates = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for w in 0..8usize {
        let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
        let (delivered, duplicates, acked, refused) =
            (delivered.clone(), duplicates.clone(), acked.clone(), refused.clone());
        workers.push(tokio::spawn(async move {
            let mut empty_in_a_row = 0;
            loop {
                let got = receive(&queues, &topic, &sub, 10).await;
                if got.is_empty() {
                    // Every message was handed out, or (a bug) some never is: stop either way.
                    if delivered.lock().unwrap().len() >= total || empty_in_a_row >= 500 {
                        return;
                    }
                    empty_in_a_row += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                empty_in_a_row = 0;
                {
                    let mut delivered = delivered.lock().unwrap();
                    for m in &got {
                        if let Some(other) = delivered.insert(at(m), w) {
                            duplicates.lock().unwrap().push((at(m), other, w, m.receive_count));
                        }
                    }
                }
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                let results = queues.ack(&topic, &sub, &receipts).await.expect("ack");
                assert_eq!(results.len(), got.len(), "one result per receipt");
                for (m, result) in got.iter().zip(results) {
                    match result {
                        Ok(()) => acked.lock().unwrap().push(at(m)),
                        Err(e) => refused.lock().unwrap().push((at(m), e)),
                    }
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }

    let duplicates = duplicates.lock().unwrap().clone();
    assert!(
        duplicates.is_empty(),
        "{} messages delivered twice with the clock stopped (position, first worker, second worker, receive_count): {:?}",
        duplicates.len(),
        &duplicates[..duplicates.len().min(10)]
    );
    let refused = refused.lock().unwrap().clone();
    assert!(
        refused.is_empty(),
        "acks of receipts within their visibility window refused: {:?}",
        &refused[..refused.len().min(10)]
    );
    assert_acked_once_each(&acked.lock().unwrap(), &published);
    assert_drained(&queues, &topic, &sub).await;
}

/// `acked` holds each of the `published` positions exactly once.
fn assert_acked_once_each(acked: &[(u32, u64)], published: &BTreeSet<(u32, u64)>) {
    let total = published.len();
    let unique: BTreeSet<(u32, u64)> = acked.iter().copied().collect();
    assert_eq!(unique.len(), acked.len(), "an offset was acked twice");
    let missing: Vec<_> = published.difference(&unique).take(10).collect();
    assert!(missing.is_empty(), "{} of {total} never acked, e.g. {missing:?}", published.len() - unique.len());
    assert_eq!(&unique, published, "acked exactly the published messages");
}

/// Every partition's cursor at its high watermark, nothing left in any count, nothing to receive.
async fn assert_drained(queues: &Queues, topic: &str, sub: &str) {
    let d = queues.describe(topic, sub).await.unwrap();
    assert_eq!(counts(&d.backlog), [0, 0, 0, 0], "drained: {:?}", d.backlog);
    for p in &d.partitions {
        assert_eq!(p.cursor, p.high_watermark, "partition {}: everything delivered", p.partition);
        assert_eq!(counts(&p.backlog), [0; 4], "partition {}: {:?}", p.partition, p.backlog);
    }
    assert_nothing(queues, topic, sub, "an acked message came back").await;
}

/// Sixteen workers on a queue of one partition, each receiving one message at a time and
/// acking it on its own: every receive and every ack rewrites that partition's cursor.
/// However hard they contend, no ack is refused as "changing too fast": requests of one
/// process take turns on a partition instead of racing for its write.
pub async fn given_sixteen_workers_on_one_partition_then_no_ack_is_refused_for_contention(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "contended", 1).await;
    let sub = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let total = scaled(backend, 1_600);
    publish(&log, &topic, (0..total).map(|i| event(format!("m{i}"), Some(0), None, None)).collect()).await;
    // A worker whose ack is refused stops them all: the message it held would never come back.
    let (acked, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
        let (acked, stop) = (acked.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            while acked.load(AtomicOrdering::SeqCst) < total && !stop.load(AtomicOrdering::SeqCst) {
                let got = receive(&queues, &topic, &sub, 1).await;
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                match queues.ack(&topic, &sub, &receipts).await {
                    Ok(results) => assert!(results.iter().all(Result::is_ok), "acks in the window: {results:?}"),
                    Err(e) => {
                        stop.store(true, AtomicOrdering::SeqCst);
                        return Err(format!("ack: {e}"));
                    }
                }
                acked.fetch_add(got.len(), AtomicOrdering::SeqCst);
            }
            Ok(())
        }));
    }
    let mut refused = Vec::new();
    for w in workers {
        refused.extend(w.await.unwrap().err());
    }
    assert!(refused.is_empty(), "{} workers' acks refused: {:?}", refused.len(), refused.first());
    assert_eq!(acked.load(AtomicOrdering::SeqCst), total, "every message acked once");
    assert_nothing(&queues, &topic, &sub, "an acked message came back").await;
}

/// Key ordering: eight workers, some of whose messages are nacked (released at once).
/// A shared map holds the keys in flight: a key received while its earlier message is
/// still held is a violation; each key's messages must be acked in offset order.
pub async fn given_ordering_by_key_under_eight_workers_with_nacks_then_one_in_flight_per_key_and_acked_in_offset_order(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "ordered", 2).await;
    let sub_spec =
        SubscriptionSpec { ordering: Ordering::Key, max_receive_count: MAX_RECEIVE_COUNT, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let keys = 8usize;
    let per_key = scaled(backend, 60).max(8);
    let mut events = Vec::new();
    for i in 0..per_key {
        for k in 0..keys {
            events.push(event(format!("k{k}-{i}"), None, Some(format!("k{k}")), None));
        }
    }
    let placed = publish(&log, &topic, events).await;
    let mut expected: BTreeMap<String, Vec<(u32, u64)>> = BTreeMap::new();
    for (i, p) in placed.iter().enumerate() {
        expected.entry(format!("k{}", i % keys)).or_default().push((p.partition, p.offset));
    }
    let total = placed.len();

    let work = Arc::new(KeyedWork::default());
    let mut workers = Vec::new();
    for _ in 0..8usize {
        workers.push(tokio::spawn(ordered_worker(queues.clone(), topic.clone(), sub.clone(), work.clone(), total)));
    }
    for w in workers {
        w.await.unwrap();
    }

    let violations = work.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "a key delivered while its earlier message was in flight (key, held, delivered): {:?}",
        &violations[..violations.len().min(10)]
    );
    assert!(work.nacks.load(AtomicOrdering::SeqCst) > 0, "the case releases some messages");
    assert_eq!(work.done.load(AtomicOrdering::SeqCst), total, "every message acked");
    let acked_order = work.acked_order.lock().unwrap().clone();
    assert_eq!(acked_order, expected, "each key's messages acked once each, in offset order");
    assert_eq!(backlog(&queues, &topic, &sub).await, [0; 4]);
}

/// A key, the position held for it, and the position delivered while it was held.
type Violation = (String, (u32, u64), (u32, u64));

/// What the key-ordered workers share: the keys they hold, what they saw, and a wake-up.
#[derive(Default)]
struct KeyedWork {
    in_flight: Mutex<HashMap<String, (u32, u64)>>,
    /// Each key delivered while its earlier message was held: (key, held, delivered).
    violations: Mutex<Vec<Violation>>,
    /// Appended while the message is still held (before its ack is sent), so the order is the ack order.
    acked_order: Mutex<BTreeMap<String, Vec<(u32, u64)>>>,
    done: AtomicUsize,
    nacks: AtomicUsize,
    /// Told after every ack or nack: a worker that found nothing waits for one rather than spin
    /// (on moto, spinning workers would crowd out the ones with work, one request at a time).
    settled: Notify,
}

/// One key-ordered worker: receives ten at a time, records the keys it holds, releases a
/// quarter of first and second deliveries and acks the rest, until `total` are acked.
async fn ordered_worker(queues: Queues, topic: String, sub: String, work: Arc<KeyedWork>, total: usize) {
    while work.done.load(AtomicOrdering::SeqCst) < total {
        // Listening before the receive: an ack landing after it cannot be missed.
        let next_settle = work.settled.notified();
        tokio::pin!(next_settle);
        next_settle.as_mut().enable();
        let got = receive(&queues, &topic, &sub, 10).await;
        if got.is_empty() {
            // Every message still to ack is held by another worker. Nothing settled for
            // a long while means a message went missing: stop, and the asserts tell.
            if work.done.load(AtomicOrdering::SeqCst) >= total
                || tokio::time::timeout(REAL_PATIENCE, next_settle).await.is_err()
            {
                return;
            }
            continue;
        }
        let key_of = |m: &Message| String::from_utf8_lossy(m.event.record.key.as_deref().unwrap_or(b"")).into_owned();
        {
            let mut held = work.in_flight.lock().unwrap();
            for m in &got {
                if let Some(other) = held.insert(key_of(m), at(m)) {
                    work.violations.lock().unwrap().push((key_of(m), other, at(m)));
                }
            }
        }
        let (mut to_ack, mut to_release) = (Vec::new(), Vec::new());
        for m in &got {
            let key = key_of(m);
            // A quarter of first and second deliveries are released for redelivery instead.
            let release = m.receive_count <= 2 && matches!(dice(m) % 4, 0);
            let mut held = work.in_flight.lock().unwrap();
            if held.get(&key) == Some(&at(m)) {
                held.remove(&key);
            }
            if release {
                to_release.push(m.receipt.clone());
            } else {
                work.acked_order.lock().unwrap().entry(key).or_default().push(at(m));
                to_ack.push(m.receipt.clone());
            }
        }
        if !to_release.is_empty() {
            work.nacks.fetch_add(to_release.len(), AtomicOrdering::SeqCst);
            let results = queues.nack(&topic, &sub, &to_release, 0).await.expect("nack");
            assert!(results.iter().all(Result::is_ok), "nacks within the visibility window: {results:?}");
        }
        if !to_ack.is_empty() {
            let results = queues.ack(&topic, &sub, &to_ack).await.expect("ack");
            assert!(results.iter().all(Result::is_ok), "acks within the visibility window: {results:?}");
            work.done.fetch_add(to_ack.len(), AtomicOrdering::SeqCst);
        }
        // Each settled message may free its key's next one: wake a worker per message
        // (not all of them, which would only crowd the store), or all at the end.
        if work.done.load(AtomicOrdering::SeqCst) >= total {
            work.settled.notify_waiters();
        } else {
            (0..got.len()).for_each(|_| work.settled.notify_one());
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Visible,
    InFlight,
    Delayed,
    Dead,
}

/// Where the model believes a message is.
#[derive(Clone, Copy, Debug)]
enum State {
    New,
    Held { until: i64 },
    Released { at: i64 },
    Acked,
}

#[derive(Clone, Copy, Debug)]
struct Tracked {
    state: State,
    count: u32,
}

impl Tracked {
    fn kind(&self, now: i64, max_receive_count: u32) -> Option<Kind> {
        match self.state {
            State::New => Some(Kind::Visible),
            State::Held { until } if now < until => Some(Kind::InFlight),
            State::Held { .. } if self.count >= max_receive_count => Some(Kind::Dead),
            State::Held { .. } => Some(Kind::Visible),
            State::Released { at } if now < at => Some(Kind::Delayed),
            State::Released { .. } => Some(Kind::Visible),
            State::Acked => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Ack,
    Nack(u64),
    Hold,
}

/// What a worker does with a message: fixed by the message and its delivery, whichever worker got it.
/// Never a release at the last allowed delivery (its place, delayed or dead, is not the case's point).
fn action(m: &Message, max_receive_count: u32) -> Action {
    match dice(m) % 8 {
        0..=2 => Action::Ack,
        3 if m.receive_count < max_receive_count => Action::Nack(2_500),
        4 if m.receive_count < max_receive_count => Action::Nack(6_000),
        _ => Action::Hold,
    }
}

fn model_counts(model: &BTreeMap<(u32, u64), Tracked>, partition: Option<u32>, now: i64, max: u32) -> [u64; 4] {
    let mut c = [0; 4];
    for (_, t) in model.iter().filter(|((p, _), _)| partition.is_none_or(|want| *p == want)) {
        match t.kind(now, max) {
            Some(Kind::Visible) => c[0] += 1,
            Some(Kind::InFlight) => c[1] += 1,
            Some(Kind::Delayed) => c[2] += 1,
            Some(Kind::Dead) => c[3] += 1,
            None => {}
        }
    }
    c
}

async fn assert_backlog_matches(
    queues: &Queues,
    topic: &str,
    sub: &str,
    model: &BTreeMap<(u32, u64), Tracked>,
    now: i64,
    max: u32,
    when: &str,
) {
    let d = queues.describe(topic, sub).await.expect("describe");
    assert_eq!(counts(&d.backlog), model_counts(model, None, now, max), "{when}: [visible, in flight, delayed, dead]");
    for p in &d.partitions {
        assert_eq!(
            counts(&p.backlog),
            model_counts(model, Some(p.partition), now, max),
            "{when}, partition {}: [visible, in flight, delayed, dead]",
            p.partition
        );
    }
}

/// Rounds of four concurrent workers receiving and then acking, releasing with a delay or
/// holding what they got; between rounds (workers paused) the clock moves 1.7 s and
/// describe's counts must equal a model built from what the receives returned and what was
/// done with each message. The model also checks each receive: only visible messages,
/// each with the next receive count.
pub async fn given_concurrent_receives_acks_and_nacks_then_backlog_counts_match_a_model_of_what_happened(
    backend: &dyn Backend,
) {
    const VISIBILITY: u64 = 4_000;
    const MAX: u32 = 3;
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "model", 3).await;
    let sub_spec =
        SubscriptionSpec { visibility_timeout_ms: VISIBILITY, max_receive_count: MAX, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let mut model: BTreeMap<(u32, u64), Tracked> = BTreeMap::new();
    let mut published = 0usize;
    let mut publish_some = |n: usize| {
        let events: Vec<NewEvent> = (0..n)
            .map(|i| event(format!("m{}", published + i), Some((published + i) as u32 % 3), None, None))
            .collect();
        published += n;
        events
    };
    for p in publish(&log, &topic, publish_some(45)).await {
        model.insert((p.partition, p.offset), Tracked { state: State::New, count: 0 });
    }
    assert_backlog_matches(&queues, &topic, &sub, &model, clock.now_ms(), MAX, "before any receive").await;

    for round in 0..14 {
        if round % 3 == 2 {
            for p in publish(&log, &topic, publish_some(6)).await {
                model.insert((p.partition, p.offset), Tracked { state: State::New, count: 0 });
            }
        }
        let now = clock.now_ms();
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (queues, topic, sub) = (queues.clone(), topic.clone(), sub.clone());
            workers.push(tokio::spawn(async move { one_turn(&queues, &topic, &sub, MAX).await }));
        }
        let mut this_round = BTreeSet::new();
        for w in workers {
            for (m, a, result) in w.await.unwrap() {
                let pos = at(&m);
                assert!(this_round.insert(pos), "round {round}: {pos:?} received by two workers at once");
                let tracked = model.get_mut(&pos).unwrap_or_else(|| panic!("round {round}: received unknown {pos:?}"));
                assert_eq!(
                    tracked.kind(now, MAX),
                    Some(Kind::Visible),
                    "round {round}: {pos:?} received while the model has it {tracked:?}"
                );
                assert_eq!(m.receive_count, tracked.count + 1, "round {round}: {pos:?}'s receive count");
                assert_eq!(result, Ok(()), "round {round}: {a:?} of {pos:?} within its window");
                tracked.count = m.receive_count;
                tracked.state = match a {
                    Action::Ack => State::Acked,
                    Action::Nack(delay) => State::Released { at: now + delay as i64 },
                    Action::Hold => State::Held { until: now + VISIBILITY as i64 },
                };
            }
        }
        assert_backlog_matches(&queues, &topic, &sub, &model, now, MAX, &format!("after round {round}")).await;
        // 1.7 s never lands on a deadline (4 s, 2.5 s, 6 s after a round): no boundary is tested here.
        clock.advance(1_700);
        let when = format!("1.7 s after round {round}");
        assert_backlog_matches(&queues, &topic, &sub, &model, clock.now_ms(), MAX, &when).await;
    }

    // Everything held or released comes due; a last worker drains the rest.
    clock.advance(100_000);
    let now = clock.now_ms();
    assert_backlog_matches(&queues, &topic, &sub, &model, now, MAX, "after every deadline").await;
    let dead: BTreeSet<(u32, u64)> =
        model.iter().filter(|(_, t)| t.kind(now, MAX) == Some(Kind::Dead)).map(|(p, _)| *p).collect();
    assert!(!dead.is_empty(), "the case dead-letters some messages");
    drain_as_modelled(&queues, &topic, &sub, &mut model, now, MAX).await;
    assert_eq!(backlog(&queues, &topic, &sub).await, [0, 0, 0, dead.len() as u64], "only the dead remain");
    let letters = all_dead_letters(&queues, &topic, &sub).await;
    let listed: BTreeSet<(u32, u64)> = letters.iter().map(|l| (l.partition, l.offset)).collect();
    assert_eq!(listed.len(), letters.len(), "each dead letter listed once");
    assert_eq!(listed, dead, "the dead letters are the messages held {MAX} times");
    assert!(letters.iter().all(|l| l.receive_count == MAX), "{letters:?}");
}

/// One worker's turn in a round: receives up to five and does with each what [`action`] says.
async fn one_turn(
    queues: &Queues,
    topic: &str,
    sub: &str,
    max: u32,
) -> Vec<(Message, Action, Result<(), ReceiptError>)> {
    let got = receive(queues, topic, sub, 5).await;
    let mut done = Vec::new();
    for m in got {
        let a = action(&m, max);
        let result = match a {
            Action::Ack => ack(queues, topic, sub, &m.receipt).await,
            Action::Nack(delay) => nack(queues, topic, sub, &m.receipt, delay).await,
            Action::Hold => Ok(()),
        };
        done.push((m, a, result));
    }
    done
}

/// A last worker acks whatever is visible at `now`, each message one the model has visible.
async fn drain_as_modelled(
    queues: &Queues,
    topic: &str,
    sub: &str,
    model: &mut BTreeMap<(u32, u64), Tracked>,
    now: i64,
    max: u32,
) {
    for _ in 0..100 {
        let got = receive(queues, topic, sub, 100).await;
        if got.is_empty() {
            break;
        }
        for m in got {
            let tracked = model.get_mut(&at(&m)).expect("known message");
            assert_eq!(tracked.kind(now, max), Some(Kind::Visible), "drained {:?} while {tracked:?}", at(&m));
            assert_eq!(ack(queues, topic, sub, &m.receipt).await, Ok(()));
            tracked.state = State::Acked;
        }
    }
}
