//! The push subscriptions' target: a scripted receiver behind the core's `Deliver` port.
//! Driven by a generator of its own (called in the scheduler's order, so a seed replays), it
//! answers each attempt with a 2xx, a partial failure (`batchItemFailures`), a 5xx, a 429 or
//! 503 with `Retry-After`, a failed connection, or not in time (the attempt's timeout passes on
//! the simulated clock first: a hung or late answer). It always fails poison messages.
//!
//! It records what it got and when, and, as each attempt begins, reads the queue's stored
//! truth (no faults): a message delivered must still be held by a lease (not acked or
//! dead-lettered before the attempt began), and under key ordering no earlier message of its
//! key may be held or waiting, and no attempt of the same key may still be under way.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sluice_core::keys::{head_key, queue_pk, CURSOR_SK, LEASE_PREFIX};
use sluice_core::layout::{self, HeadRecord};
use sluice_core::ports::deliver::{Answer, Deliver, Delivery};
use sluice_core::push::webhook;
use sluice_core::queues::{CursorItem, LeaseRecord};
use sluice_core::Clock;
use sluice_testkit::{MemStore, SimClock};

use crate::rng::Rng;
use crate::trace::Trace;

use super::T0;

/// Every this many events, one is poison: its receiver always fails it.
const POISON_EVERY: u64 = 9;

/// Whether the receiver always fails the event `e`.
pub(crate) fn poison(e: u64) -> bool {
    e % POISON_EVERY == 4
}

/// How the receiver answers an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Script {
    /// 2xx, naming the poison messages (if any) as failed.
    Ok,
    /// 2xx naming some messages (and the poison ones) as failed.
    Partial,
    ServerError,
    /// 429 or 503 with a `Retry-After`.
    Throttled,
    /// No connection.
    Refused,
    /// Answers after the attempt's timeout (or never): the attempt times out.
    Late,
}

/// One message of an attempt, as its body named it.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) partition: u32,
    pub(crate) offset: u64,
    pub(crate) receive_count: u32,
    pub(crate) key: Option<String>,
    /// The simulation's event id, from its value.
    pub(crate) event: Option<u64>,
    /// Its schedule, as the body shows it.
    pub(crate) deliver_at: Option<i64>,
}

/// One attempt as the receiver saw it.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub(crate) sub: String,
    pub(crate) items: Vec<Item>,
    pub(crate) start_ms: i64,
    /// When the dispatcher's side of it ends: its answer, or its timeout.
    pub(crate) until_ms: i64,
    pub(crate) script: Script,
    /// Items answered as failed (all of them when the attempt failed).
    pub(crate) failed: BTreeSet<usize>,
    /// Over: answered, or dropped (its process died).
    pub(crate) ended: bool,
    /// The dispatcher got its answer (not dropped on a crash).
    pub(crate) answered: bool,
}

impl Attempt {
    /// The dispatcher counts it as succeeded: a 2xx that did not fail every item.
    pub(crate) fn succeeded(&self) -> bool {
        matches!(self.script, Script::Ok | Script::Partial) && self.failed.len() < self.items.len()
    }
}

/// A push subscription, as the receiver knows it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) id: u64,
    pub(crate) keyed: bool,
    /// The signing key.
    pub(crate) key: Vec<u8>,
}

#[derive(Default)]
struct State {
    attempts: Vec<Attempt>,
    /// Broken promises seen at attempt starts, for the checker to report.
    problems: Vec<(&'static str, String)>,
    /// Answers without waits or timeouts, fewer failures: the end's drain.
    calm: bool,
}

/// The scripted receiver.
pub(crate) struct Receiver {
    clock: Arc<SimClock>,
    mem: MemStore,
    trace: Trace,
    topic_id: AtomicU64,
    targets: Mutex<BTreeMap<String, Target>>,
    rng: Mutex<Rng>,
    state: Mutex<State>,
}

impl Receiver {
    pub(crate) fn new(clock: Arc<SimClock>, mem: MemStore, trace: Trace, seed: u64) -> Self {
        Self {
            clock,
            mem,
            trace,
            topic_id: AtomicU64::new(0),
            targets: Mutex::default(),
            rng: Mutex::new(Rng::new(seed.rotate_left(53) ^ 0x9e5f_7a11_c0de)),
            state: Mutex::default(),
        }
    }

    /// The topic its subscriptions are on (a fresh receiver: before any delivery).
    pub(crate) fn set_topic(&self, topic_id: u64) {
        self.topic_id.store(topic_id, Ordering::Relaxed);
    }

    pub(crate) fn add_target(&self, name: &str, target: Target) {
        self.targets.lock().unwrap().insert(name.to_owned(), target);
    }

    pub(crate) fn set_calm(&self, calm: bool) {
        self.state.lock().unwrap().calm = calm;
    }

    /// The attempts so far (a copy).
    pub(crate) fn attempts(&self) -> Vec<Attempt> {
        self.state.lock().unwrap().attempts.clone()
    }

    /// The attempts from the `from`th on (a copy).
    pub(crate) fn attempts_since(&self, from: usize) -> Vec<Attempt> {
        self.state.lock().unwrap().attempts.get(from..).unwrap_or_default().to_vec()
    }

    pub(crate) fn attempt_count(&self) -> usize {
        self.state.lock().unwrap().attempts.len()
    }

    /// The problems seen since the last call.
    pub(crate) fn take_problems(&self) -> Vec<(&'static str, String)> {
        std::mem::take(&mut self.state.lock().unwrap().problems)
    }

    /// The latest attempt of `sub` that carried message `partition@offset` at `receive_count`.
    pub(crate) fn attempt_of(&self, sub: &str, partition: u32, offset: u64, receive_count: u32) -> Option<Attempt> {
        let s = self.state.lock().unwrap();
        let found = s.attempts.iter().rev().find(|a| {
            a.sub == sub
                && a.items
                    .iter()
                    .any(|i| (i.partition, i.offset, i.receive_count) == (partition, offset, receive_count))
        });
        found.cloned()
    }

    /// Starts an attempt: checks it against the stored truth, scripts its answer and records it.
    fn begin(&self, d: &Delivery) -> (usize, u64, Answer) {
        let now = self.clock.now_ms();
        let (sub, items, ids) = parse_body(&d.body);
        let target = self.targets.lock().unwrap().get(&sub).cloned();
        let mut problems = Vec::new();
        if let Some(t) = &target {
            if !signed(d, &t.key, now) {
                problems.push(("push-signature", format!("{sub}: a delivery whose signature does not verify")));
            }
            problems.extend(self.check_held(&sub, t, &items));
        }
        let calm = self.state.lock().unwrap().calm;
        let (script, wait, failed) = self.script(&items, d.timeout_ms, calm);
        let answer = answer(script, &failed, &ids);
        let mut s = self.state.lock().unwrap();
        if let Some(t) = target.filter(|t| t.keyed) {
            problems.extend(overlaps(&s.attempts, &sub, &items, now, t.id));
        }
        let attempt = Attempt {
            sub,
            items,
            start_ms: now,
            until_ms: now + wait.min(d.timeout_ms) as i64,
            script,
            failed,
            ended: false,
            answered: false,
        };
        self.trace.line(format!(
            "t={} push attempt {} {}: {:?} -> {script:?} in {wait} ms",
            now - T0,
            s.attempts.len(),
            attempt.sub,
            attempt.items.iter().map(|i| (i.partition, i.offset, i.receive_count)).collect::<Vec<_>>()
        ));
        s.attempts.push(attempt);
        s.problems.extend(problems);
        (s.attempts.len() - 1, wait.min(d.timeout_ms), answer)
    }

    /// The answer, how long it takes, and the items it fails.
    fn script(&self, items: &[Item], timeout_ms: u64, calm: bool) -> (Script, u64, BTreeSet<usize>) {
        let mut rng = self.rng.lock().unwrap();
        let script = if calm {
            [Script::Ok, Script::Partial, Script::ServerError][rng.weighted(&[90, 5, 5])]
        } else {
            let all =
                [Script::Ok, Script::Partial, Script::ServerError, Script::Throttled, Script::Refused, Script::Late];
            all[rng.weighted(&[55, 12, 10, 5, 5, 13])]
        };
        let wait = match script {
            _ if calm => 0,
            Script::Late => timeout_ms + rng.range(1, timeout_ms as i64) as u64,
            _ if rng.chance(0.4) => 0,
            _ => rng.range(1, timeout_ms as i64 - 1) as u64,
        };
        let mut failed: BTreeSet<usize> = match script {
            Script::Ok => BTreeSet::new(),
            Script::Partial => (0..items.len()).filter(|_| rng.chance(0.5)).collect(),
            _ => (0..items.len()).collect(),
        };
        failed.extend(items.iter().enumerate().filter(|(_, i)| i.event.is_some_and(poison)).map(|(n, _)| n));
        (script, wait, failed)
    }

    /// Each message must still be held (under a lease) as its attempt begins: one acked or
    /// dead-lettered before is one delivered after its store-side settle. Under key order,
    /// no earlier message of its key may be held or waiting (unless earlier in this batch,
    /// or scheduled and waiting for its time: that holds back no other).
    fn check_held(&self, sub: &str, t: &Target, items: &[Item]) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let partitions: BTreeSet<u32> = items.iter().map(|i| i.partition).collect();
        for p in partitions {
            let (_, leases) = stored_queue(&self.mem, t.id, p);
            let log_start = self.mem.peek(&head_key(self.topic_id.load(Ordering::Relaxed), p));
            let log_start =
                log_start.and_then(|i| layout::decode::<HeadRecord>("head", &i.value).ok()).map_or(0, |h| h.start);
            let held: BTreeMap<u64, Option<u64>> =
                leases.iter().flat_map(|l| l.msgs.iter().map(|m| (m.offset, m.key))).collect();
            // A scheduled message waiting for its time holds back no other of its key.
            let waiting: BTreeSet<u64> =
                leases.iter().filter(|l| l.scheduled).flat_map(|l| l.msgs.iter().map(|m| m.offset)).collect();
            let batch: Vec<u64> = items.iter().filter(|i| i.partition == p).map(|i| i.offset).collect();
            for (n, o) in batch.iter().enumerate() {
                let Some(key) = held.get(o) else {
                    problems.push(("push-after-settle", format!("{sub} {p}@{o}: delivered, but no lease holds it")));
                    continue;
                };
                let Some(key) = key.filter(|_| t.keyed) else { continue };
                let earlier: Vec<u64> = held
                    .range(log_start.min(*o)..*o)
                    .filter(|(o1, k)| **k == Some(key) && !batch[..n].contains(o1) && !waiting.contains(o1))
                    .map(|(o1, _)| *o1)
                    .collect();
                if !earlier.is_empty() {
                    problems.push((
                        "push-key-order",
                        format!("{sub} {p}@{o}: delivered while {earlier:?} of its key are not settled"),
                    ));
                }
            }
        }
        problems
    }

    fn end(&self, idx: usize, answered: bool) {
        let mut s = self.state.lock().unwrap();
        if let Some(a) = s.attempts.get_mut(idx) {
            a.ended = true;
            a.answered = answered;
        }
    }
}

/// A queue partition as stored: its cursor item, and its leases (inline and as items).
pub(crate) fn stored_queue(mem: &MemStore, sub_id: u64, p: u32) -> (Option<CursorItem>, Vec<LeaseRecord>) {
    let (mut cursor, mut leases) = (None, Vec::new());
    for item in mem.peek_all(&queue_pk(sub_id, p)) {
        if item.key.sk == CURSOR_SK {
            if let Ok(c) = layout::decode::<CursorItem>("cursor", &item.value) {
                leases.extend(c.leases.iter().map(|l| l.record.clone()));
                cursor = Some(c);
            }
        } else if item.key.sk.starts_with(LEASE_PREFIX) {
            leases.extend(layout::decode::<LeaseRecord>("lease", &item.value).ok());
        }
    }
    (cursor, leases)
}

/// Attempts of `sub` still under way, before their end, that carry a key of `items`: two
/// attempts of one key at once.
fn overlaps(attempts: &[Attempt], sub: &str, items: &[Item], now: i64, sub_id: u64) -> Vec<(&'static str, String)> {
    let keys: BTreeSet<(u32, &String)> = items.iter().filter_map(|i| Some((i.partition, i.key.as_ref()?))).collect();
    let mut problems = Vec::new();
    for (n, a) in attempts.iter().enumerate().filter(|(_, a)| a.sub == sub && !a.ended && now < a.until_ms) {
        let shared: Vec<&Item> =
            a.items.iter().filter(|i| i.key.as_ref().is_some_and(|k| keys.contains(&(i.partition, k)))).collect();
        if let Some(i) = shared.first() {
            problems.push((
                "push-key-overlap",
                format!(
                    "{sub} ({sub_id:x}): an attempt of key {:?} began while attempt {n} (with {}@{}, until {}) was under way",
                    i.key,
                    i.partition,
                    i.offset,
                    a.until_ms - T0
                ),
            ));
        }
    }
    problems
}

/// The subscription, the items and their ids, of a delivery's body.
fn parse_body(body: &[u8]) -> (String, Vec<Item>, Vec<String>) {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let sub = v["subscription"].as_str().unwrap_or_default().to_owned();
    let (mut items, mut ids) = (Vec::new(), Vec::new());
    for m in v["messages"].as_array().into_iter().flatten() {
        let value = match m.get("value_base64").and_then(|b| b.as_str()) {
            Some(b) => STANDARD.decode(b).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok()),
            None => m.get("value").cloned(),
        };
        items.push(Item {
            partition: m["partition"].as_u64().unwrap_or_default() as u32,
            offset: m["offset"].as_u64().unwrap_or_default(),
            receive_count: m["receive_count"].as_u64().unwrap_or_default() as u32,
            key: m["key"].as_str().map(str::to_owned),
            event: value.and_then(|v| v.get("e")?.as_u64()),
            deliver_at: m["deliver_at_ms"].as_i64(),
        });
        ids.push(m["id"].as_str().unwrap_or_default().to_owned());
    }
    (sub, items, ids)
}

/// Whether the delivery carries a valid Standard Webhooks signature with `key`.
fn signed(d: &Delivery, key: &[u8], now_ms: i64) -> bool {
    let header = |name: &str| d.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).unwrap_or_default();
    let (id, ts, sig) = (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"));
    webhook::verify(key, id, ts, sig, &d.body, now_ms.div_euclid(1000))
}

fn answer(script: Script, failed: &BTreeSet<usize>, ids: &[String]) -> Answer {
    let status =
        |status: u16, retry_after_ms: Option<u64>, body: Vec<u8>| Answer::Status { status, retry_after_ms, body };
    match script {
        Script::Ok | Script::Partial => {
            let named: Vec<serde_json::Value> = failed
                .iter()
                .filter_map(|n| ids.get(*n))
                .map(|id| serde_json::json!({ "itemIdentifier": id }))
                .collect();
            status(
                200,
                None,
                serde_json::to_vec(&serde_json::json!({ "batchItemFailures": named })).unwrap_or_default(),
            )
        }
        Script::ServerError => status(500, None, b"boom".to_vec()),
        Script::Throttled => status(503, Some(1_000), Vec::new()),
        Script::Refused => Answer::Failed("connection refused".into()),
        Script::Late => Answer::TimedOut,
    }
}

/// Ends its attempt when dropped: answered, or dropped with its process.
struct Ending<'a> {
    receiver: &'a Receiver,
    idx: usize,
    answered: bool,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.receiver.end(self.idx, self.answered);
    }
}

#[async_trait]
impl Deliver for Receiver {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        let (idx, wait, answer) = self.begin(delivery);
        let mut ending = Ending { receiver: self, idx, answered: false };
        if wait > 0 {
            self.clock.sleep(wait).await;
        }
        ending.answered = true;
        drop(ending);
        answer
    }
}
