//! What push delivery promises (docs/API.md, "Push"), held against what the scripted
//! receiver got and the stored truth:
//! - a message is delivered only while a lease holds it (never after its ack or its move to
//!   the DLQ landed), and under key order only once every earlier message of its key is
//!   settled, with no attempt of its key still under way (checked as each attempt begins, in
//!   `world::receiver`);
//! - a message the receiver took is acked once the dispatcher's settling answered ok;
//! - only events that pass the subscription's filter are delivered, and its `filtered` count
//!   is every event that failed it while still in the log (exact, where retention did not
//!   race the cursor: then bounded);
//! - once quiet and drained: every matching event still in the log was delivered at least
//!   once or dead-lettered, each poison message is dead-lettered exactly once, and the
//!   delivery counts are the receiver's (exact for the quiet drain; over a run with crashes
//!   and lost writes, bounded: counts kept in memory die with their process).

use std::collections::{BTreeMap, BTreeSet};

use sluice_core::keys::cursor_key;
use sluice_core::layout;
use sluice_core::push::{Drained, Topics};
use sluice_core::queues::{CursorItem, PushStatsRecord, PushSubscription, Queues};
use sluice_core::Clock;

use crate::model::SimFilter;
use crate::world::{code, poison, stored_queue, Attempt, Pushed, Script, World, PUSH_SUBS, SUB_P, T0, TOPIC_A};

/// Rounds of the end's drain (each after the clock passed every backoff) before giving up.
const END_ROUNDS: usize = 100;

impl World {
    /// The problems the receiver saw as attempts began, and each new attempt's messages:
    /// events of TOPIC_A, passing the subscription's filter.
    pub(crate) fn check_push_attempts(&mut self) {
        for (property, detail) in self.push.receiver.take_problems() {
            self.violate(property, detail);
        }
        if self.push.receiver.attempt_count() == self.push.seen {
            return;
        }
        let new = self.push.receiver.attempts_since(self.push.seen);
        self.push.seen += new.len();
        for a in new {
            self.check_push_attempt(&a);
        }
    }

    fn check_push_attempt(&mut self, a: &Attempt) {
        let Some(sub) = PUSH_SUBS.iter().copied().find(|s| *s == a.sub) else {
            return self.violate("push-content", format!("an attempt for subscription {:?}", a.sub));
        };
        self.stat("push_attempts");
        match a.script {
            Script::Late => self.stat("push_late"),
            Script::Partial => self.stat("push_partial"),
            _ => {}
        }
        if a.items.iter().any(|i| i.receive_count > 1) {
            self.stat("push_retries");
        }
        let filter = self.push.filter_of(sub);
        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
        for i in &a.items {
            self.push.delivered.insert((sub, i.partition, i.offset));
            let at = format!("{sub} {}@{} (attempt at {})", i.partition, i.offset, a.start_ms - T0);
            let Some(info) = i.event.and_then(|e| self.events.get(&e)) else {
                self.violate("push-content", format!("{at}: not an event of the simulation"));
                continue;
            };
            let mut problems = Vec::new();
            if info.topic != TOPIC_A || info.key.as_deref() != i.key.as_deref().map(str::as_bytes) {
                problems.push(("push-content", format!("{at}: event {:?} of {} differs", i.event, info.topic)));
            }
            if !filter.passes(info) {
                problems.push(("push-filtered-delivered", format!("{at}: delivered, but {filter:?} does not pass it")));
            }
            let scheduled = info.sched.map(|s| s.lo);
            for (property, detail) in problems {
                self.violate(property, detail);
            }
            if let Some(lo) = scheduled {
                self.stat("scheduled_pushed");
                self.check_pushed_not_early(&at, i.deliver_at, lo, a.start_ms);
            } else if i.deliver_at.is_some() {
                self.violate("push-content", format!("{at}: a schedule on an event published without one"));
            }
            let known = self.facts.get(&(tid, i.partition, i.offset));
            if known.is_some_and(|e| Some(*e) != i.event) {
                self.violate("push-content", format!("{at}: event {:?}, the log holds {known:?}", i.event));
            }
        }
    }

    /// After a delivery whose settling answered ok, each message its receiver took (a 2xx not
    /// naming it) is no longer held by the lease it was delivered under: its ack applied. (A
    /// window that ended first makes the ack stale, and the message due again: allowed.)
    pub(crate) fn check_push_acks(&mut self, sub: &'static str, got: &[Pushed], now: i64) {
        let Some(sub_id) = self.push.subs.get(sub).map(|s| s.id) else { return };
        for &(p, o, nonce, count) in got {
            let Some(a) = self.push.receiver.attempt_of(sub, p, o, count) else { continue };
            let n = a.items.iter().position(|i| (i.partition, i.offset, i.receive_count) == (p, o, count));
            let took = a.answered && a.succeeded() && n.is_some_and(|n| !a.failed.contains(&n));
            if !took {
                continue;
            }
            let (_, leases) = stored_queue(&self.mem, sub_id, p);
            let still = leases.iter().find(|l| l.nonce == nonce && l.msgs.iter().any(|m| m.offset == o));
            if let Some(until) = still.and_then(|l| l.held_until).filter(|u| *u > now) {
                self.violate(
                    "push-ack-applied",
                    format!(
                        "{sub} {p}@{o}: the receiver took it and the settling answered ok, yet its delivery \
                         still holds it until {}",
                        until - T0
                    ),
                );
            }
        }
    }

    /// Notes the offsets SUB_P's cursor passed since the last look that are still in the log:
    /// those were in the log when passed, so a filtered one among them was counted so.
    pub(crate) fn observe_push_cursors(&mut self) {
        let (Some(tid), Some(sub_id)) = (self.live_topic_id(TOPIC_A), self.push.subs.get(SUB_P).map(|s| s.id)) else {
            return;
        };
        for p in 0..self.topic_specs[TOPIC_A].partitions {
            let cursor = self.mem.peek(&cursor_key(sub_id, p));
            let Some(next) = cursor.and_then(|i| layout::decode::<CursorItem>("cursor", &i.value).ok()).map(|c| c.next)
            else {
                continue;
            };
            let from = self.push.cursors.get(&p).copied().unwrap_or(0);
            let log_start = self.head_now(tid, p).start;
            self.push.passed_in_log.extend((from.max(log_start)..next).map(|o| (p, o)));
            self.push.cursors.insert(p, next.max(from));
        }
    }

    /// The end: faults off, everything quiet. A dispatcher drains the push subscriptions (the
    /// receiver calm: no waits, fewer failures), the clock passing every backoff between
    /// rounds, until nothing is left; then the end's promises.
    pub(crate) async fn push_end(&mut self) {
        // Only the subscriptions created at the start, on the topic they were created on.
        let live = |w: &World, sub: &PushSubscription| w.sub_now(TOPIC_A, &sub.name).is_some_and(|r| r.id == sub.id);
        if !self.push.subs.values().all(|s| live(self, s)) {
            return;
        }
        self.push.receiver.set_calm(true);
        let dispatchers: Vec<_> = self.procs.iter().map(|p| p.dispatcher.clone()).collect();
        for d in &dispatchers {
            d.flush_stats().await;
        }
        let (queues, dispatcher) = (self.procs[0].queues.clone(), dispatchers[0].clone());
        let before = self.push_counts(&queues).await;
        let first = self.push.receiver.attempt_count();
        let mut drained = Drained::default();
        for round in 0.. {
            let deadline = self.clock.now_ms() + 3_600_000;
            match dispatcher.drain(&Topics::Named(vec![TOPIC_A.into()]), deadline).await {
                Ok(d) => {
                    drained.deliveries += d.deliveries;
                    drained.messages += d.messages;
                    drained.failed_messages += d.failed_messages;
                }
                Err(e) => return self.violate("push-drain", format!("the end's drain: {}", code(&e))),
            }
            self.check_push_attempts();
            self.observe_push_cursors();
            if !self.push_backlog_left(&queues).await {
                break;
            }
            if round == END_ROUNDS {
                return self
                    .violate("push-drain", format!("messages left after {END_ROUNDS} rounds of the end's drain"));
            }
            self.clock.advance(61_000);
        }
        let after = self.push_counts(&queues).await;
        self.check_push_counts(&before, &after, first, drained);
        for sub in PUSH_SUBS {
            self.check_push_settled(&queues, sub).await;
        }
    }

    async fn push_backlog_left(&mut self, queues: &Queues) -> bool {
        let mut left = false;
        for sub in PUSH_SUBS {
            match queues.describe(TOPIC_A, sub).await {
                Ok(d) => left |= d.backlog.visible + d.backlog.in_flight + d.backlog.delayed > 0,
                Err(e) => self.violate("push-drain", format!("describe {sub}: {}", code(&e))),
            }
        }
        left
    }

    async fn push_counts(&mut self, queues: &Queues) -> BTreeMap<&'static str, PushStatsRecord> {
        let mut out = BTreeMap::new();
        for sub in PUSH_SUBS {
            match queues.describe(TOPIC_A, sub).await.map(|d| d.deliveries) {
                Ok(Some(stats)) => {
                    out.insert(sub, stats);
                }
                other => self.violate("push-counts", format!("describe {sub}: {:?}", other.map_err(|e| code(&e)))),
            }
        }
        out
    }

    /// The counts the quiet drain added are its attempts, exactly; the run's are at most the
    /// receiver's answered attempts (a crash loses the counts its process kept in memory).
    fn check_push_counts(
        &mut self,
        before: &BTreeMap<&'static str, PushStatsRecord>,
        after: &BTreeMap<&'static str, PushStatsRecord>,
        first: usize,
        drained: Drained,
    ) {
        let all = self.push.receiver.attempts();
        let mut problems = Vec::new();
        let tally = |attempts: &[Attempt], sub: &str| {
            let mine: Vec<&Attempt> = attempts.iter().filter(|a| a.sub == sub && a.answered).collect();
            let ok = mine.iter().filter(|a| a.succeeded()).count() as u64;
            (mine.len() as u64, ok, mine.len() as u64 - ok)
        };
        for sub in PUSH_SUBS {
            let (Some(b), Some(a)) = (before.get(sub), after.get(sub)) else { continue };
            let added = (a.attempted - b.attempted, a.succeeded - b.succeeded, a.failed - b.failed);
            let quiet = tally(&all[first..], sub);
            if added != quiet {
                problems.push(format!(
                    "{sub}: the end's drain added {added:?} (attempted, succeeded, failed), its receiver saw {quiet:?}"
                ));
            }
            let run = tally(&all, sub);
            if a.attempted != a.succeeded + a.failed || a.succeeded > run.1 || a.failed > run.2 {
                problems.push(format!("{sub}: counted {a:?}, the receiver answered {run:?}"));
            }
        }
        let quiet = &all[first..];
        let messages: u64 = quiet.iter().map(|a| a.items.len() as u64).sum();
        if (drained.deliveries, drained.messages) != (quiet.len() as u64, messages) {
            problems.push(format!(
                "the end's drain answered {drained:?}, its receiver saw {} attempts of {messages} messages",
                quiet.len()
            ));
        }
        if !problems.is_empty() {
            self.violate("push-counts", problems.join("; "));
        }
    }

    /// Once drained: every event still in the log that passes the filter was delivered or is
    /// a dead letter; each poison one is a dead letter, listed once; `filtered` is exact.
    async fn check_push_settled(&mut self, queues: &Queues, sub: &'static str) {
        let Some(tid) = self.live_topic_id(TOPIC_A) else { return };
        let Some(dead) = self.push_dead(queues, sub).await else { return };
        let filter = self.push.filter_of(sub);
        let (mut missing, mut poison_alive) = (Vec::new(), Vec::new());
        let (mut failing, mut sure) = (0u64, 0u64);
        for p in 0..self.topic_specs[TOPIC_A].partitions {
            let head = self.head_now(tid, p);
            for o in 0..head.next {
                let e = self.facts.get(&(tid, p, o)).copied();
                // An event never seen (below the log start, its publish's answer lost) may fail the filter.
                let passes = e.map_or(filter == SimFilter::None, |e| filter.passes(&self.events[&e]));
                if !passes {
                    failing += 1;
                    sure += u64::from(e.is_some() && self.push.passed_in_log.contains(&(p, o)));
                    continue;
                }
                // Below the log start: perhaps removed by retention before it was delivered.
                if o < head.start {
                    continue;
                }
                if e.is_some_and(poison) {
                    self.stat("push_poison_dead");
                    if !dead.contains(&(p, o)) {
                        poison_alive.push(format!("{p}@{o}"));
                    }
                } else if !self.push.delivered.contains(&(sub, p, o)) && !dead.contains(&(p, o)) {
                    missing.push(format!("{p}@{o}"));
                }
            }
        }
        if !missing.is_empty() {
            missing.truncate(6);
            self.violate("push-at-least-once", format!("{sub}: never delivered nor dead: {missing:?}"));
        }
        if !poison_alive.is_empty() {
            poison_alive.truncate(6);
            self.violate("push-poison-dead", format!("{sub}: poison messages not in the DLQ: {poison_alive:?}"));
        }
        if filter != SimFilter::None {
            self.check_push_filtered(queues, sub, (sure, failing)).await;
        }
    }

    /// `filtered` counts every event that failed the filter while in the log: at least those
    /// the cursor surely passed in the log, at most every failing (or unknown) one.
    async fn check_push_filtered(&mut self, queues: &Queues, sub: &'static str, (lo, hi): (u64, u64)) {
        let filtered = match queues.describe(TOPIC_A, sub).await {
            Ok(d) => d.backlog.filtered,
            Err(e) => return self.violate("push-filtered", format!("describe {sub}: {}", code(&e))),
        };
        *self.stats.entry("push_filtered").or_default() += filtered;
        if lo == hi {
            self.stat("push_filtered_exact");
        }
        if filtered < lo || filtered > hi {
            self.violate(
                "push-filtered",
                format!("{sub}: filtered {filtered}, between {lo} and {hi} failed the filter"),
            );
        }
    }

    /// The dead letters of `sub`, each listed once; None if listing failed (a violation).
    async fn push_dead(&mut self, queues: &Queues, sub: &'static str) -> Option<BTreeSet<(u32, u64)>> {
        let mut dead = BTreeSet::new();
        let mut after: Option<String> = None;
        loop {
            let page = match queues.dead_letters(TOPIC_A, sub, after.as_deref(), 1000).await {
                Ok(page) => page,
                Err(e) => {
                    self.violate("push-dlq", format!("{sub}: dead letters {}", code(&e)));
                    return None;
                }
            };
            for e in &page.entries {
                if !dead.insert((e.partition, e.offset)) {
                    self.violate("push-dlq-once", format!("{sub}: {} listed twice", e.id));
                }
            }
            *self.stats.entry("push_dead").or_default() += page.entries.len() as u64;
            match page.next {
                Some(n) => after = Some(n),
                None => return Some(dead),
            }
        }
    }
}
