//! The queues drained at the end: every message of each live subscription acked,
//! dead-lettered or expired, exactly once, and counted so.

use std::collections::BTreeSet;

use sluice_core::queues::{Message, Queues, ReceiveRequest, SubscriptionDescription};
use sluice_core::Clock;

use crate::model::SimFilter;
use crate::world::{code, receipt_parts, Act, Done, Held, Res, World, SUB_Q, SUB_QK, TOPIC_A};

/// Messages by (partition, offset).
type Offsets = BTreeSet<(u32, u64)>;

impl World {
    /// Receives and acks everything left, then checks that every message of each live
    /// subscription was acked, dead-lettered or expired, exactly once, and that the counts say so.
    pub(crate) async fn drain_queues(&mut self, queues: &Queues) {
        for sub in [SUB_Q, SUB_QK] {
            let Some(sub_id) = self.learn_sub(sub) else { continue };
            if !self.drain_sub(queues, sub, sub_id).await {
                return;
            }
            // Everything is settled now: acked, dead, or expired, each message once.
            let described = match queues.describe(TOPIC_A, sub).await {
                Ok(s) => s,
                Err(e) => return self.violate("queue-drain", code(&e)),
            };
            let Some(dead) = self.dead_listed(queues, sub).await else { return };
            self.check_settled(sub, sub_id, described, &dead);
        }
    }

    /// Receives and acks until the subscription is empty; false if that failed (a violation).
    /// On a seed of zero windows, the drain's receives ask for a window of 0: each delivery is
    /// answered and its receipt acks it (nobody else receives meanwhile).
    async fn drain_sub(&mut self, queues: &Queues, sub: &'static str, sub_id: u64) -> bool {
        let window = if self.zero_windows() { 0 } else { 60_000 };
        let mut rounds = 0;
        loop {
            rounds += 1;
            let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: Some(window) };
            let out_before = self.out_of_reach(queues, sub, window).await;
            self.seq += 1;
            let start_seq = self.seq;
            let start_ms = self.clock.now_ms();
            let got = queues.receive(TOPIC_A, sub, &req).await;
            self.seq += 1;
            if let (Some(before), Ok(ms)) = (out_before, &got) {
                self.check_zero_window(queues, sub, (before, start_ms), ms).await;
            }
            let d = Done {
                client: 0,
                act: Act::Receive { sub, visibility: window },
                start_seq,
                end_seq: self.seq,
                start_ms,
                end_ms: self.clock.now_ms(),
                topic0: None,
                touch0: 0,
                res: Res::Crashed,
            };
            match got {
                Ok(ms) if ms.is_empty() => {
                    let described = queues.describe(TOPIC_A, sub).await;
                    match described.as_ref().map(|s| &s.backlog) {
                        Ok(b) if b.visible + b.in_flight + b.delayed + b.unscanned + b.scheduled == 0 => return true,
                        // Only scheduled ones are left: on to the next one's time.
                        Ok(b) if b.visible + b.in_flight + b.delayed + b.unscanned == 0 => self.clock.advance(5000),
                        Ok(_) => self.clock.advance(1000),
                        Err(e) => {
                            self.violate("queue-drain", format!("{sub}: describe {}", code(e)));
                            return false;
                        }
                    }
                }
                Ok(ms) => self.ack_drained(queues, sub, sub_id, &d, ms, window).await,
                Err(e) => {
                    self.violate("queue-drain", format!("{sub}: receive {}", code(&e)));
                    return false;
                }
            }
            if rounds > 500 {
                self.violate("queue-drain", format!("{sub}: still not empty after 500 rounds"));
                return false;
            }
        }
    }

    /// The messages a drain received, checked as deliveries and acked.
    async fn ack_drained(
        &mut self,
        queues: &Queues,
        sub: &'static str,
        sub_id: u64,
        d: &Done,
        ms: Vec<Message>,
        window: u64,
    ) {
        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
        let mut receipts = Vec::new();
        for m in &ms {
            let (sid, p, o, nonce, count) = receipt_parts(&m.receipt).unwrap();
            self.check_event(TOPIC_A, tid, p, o, &m.event.record, "drain");
            self.check_not_early(sub, p, o, &m.event.record, self.clock.now_ms());
            if sid == sub_id {
                self.check_delivery(d, sid, p, o, nonce, count, window);
            }
            receipts.push(m.receipt.clone());
        }
        if let Ok(results) = queues.ack(TOPIC_A, sub, &receipts).await {
            for (m, r) in ms.iter().zip(results) {
                let (sid, p, o, nonce, _) = receipt_parts(&m.receipt).unwrap();
                if r.is_err() {
                    self.violate("queue-drain", format!("{sub}: ack of {p}@{o} in a quiet queue refused"));
                }
                let h = Held { receipt: String::new(), sub_id: sid, partition: p, offset: o, nonce, count: 0 };
                let seq = self.seq;
                if let Some(dl) = self.delivery_mut(&h) {
                    dl.acked_ok = Some(seq);
                    dl.ack_seq.get_or_insert(seq);
                }
            }
        }
    }

    /// Before a drain's receive with a window of 0 (`None` for other windows), what of the
    /// subscription's backlog is out of reach: in flight, delayed or dead.
    async fn out_of_reach(&mut self, queues: &Queues, sub: &'static str, window: u64) -> Option<u64> {
        if window > 0 {
            return None;
        }
        queues.describe(TOPIC_A, sub).await.ok().map(|s| s.backlog.in_flight + s.backlog.delayed + s.backlog.dead)
    }

    /// In a quiet queue, at one instant, a receive with a window of 0 puts a message out of
    /// reach (delayed by a backoff, or dead) only by delivering it: a take it did not answer
    /// is a delivery nobody saw, and leads to a message dead-lettered without its deliveries.
    async fn check_zero_window(&mut self, queues: &Queues, sub: &'static str, before: (u64, i64), ms: &[Message]) {
        let (before, at) = before;
        let Ok(described) = queues.describe(TOPIC_A, sub).await else { return };
        let b = described.backlog;
        let after = b.in_flight + b.delayed + b.dead;
        if self.clock.now_ms() == at && after > before + ms.len() as u64 {
            self.violate(
                "zero-window-delivered",
                format!(
                    "{sub}: a quiet receive with a window of 0 answered {} messages, and those in flight, \
                     delayed or dead went from {before} to {after}",
                    ms.len()
                ),
            );
        }
    }

    /// Every dead letter of the subscription, each listed once; None if listing failed.
    pub(crate) async fn dead_listed(&mut self, queues: &Queues, sub: &'static str) -> Option<Offsets> {
        let mut dead = BTreeSet::new();
        let mut after: Option<String> = None;
        loop {
            match queues.dead_letters(TOPIC_A, sub, after.as_deref(), 1000).await {
                Ok(page) => {
                    for e in &page.entries {
                        if !dead.insert((e.partition, e.offset)) {
                            self.violate("dlq-once", format!("{sub}: {} listed twice", e.id));
                        }
                    }
                    match page.next {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
                Err(e) => {
                    self.violate("queue-drain", format!("dead letters: {}", code(&e)));
                    return None;
                }
            }
        }
        Some(dead)
    }

    /// Once drained, every message of the subscription was acked, dead-lettered, expired or
    /// filtered, exactly once, and the backlog's counts say so.
    fn check_settled(&mut self, sub: &'static str, sub_id: u64, described: SubscriptionDescription, dead: &Offsets) {
        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
        let s = &self.subs[&sub_id];
        let (total, acked, maybe, mut problems) = self.tally_settled(tid, sub_id, dead);
        let b = described.backlog;
        let filter = if sub == SUB_Q { self.q_filter } else { SimFilter::None };
        // One pass over the subscription's range. An event the model never learned (its
        // publish's answer lost, nobody read it) may fail the filter, unless there is none.
        // The totals below could balance with a passing event filtered and a failing one
        // expired instead, so each event still in the log that passes must have been
        // delivered and settled (it cannot have expired).
        let mut failing = 0u64;
        // Settled by a purge, perhaps: no more of them than purges and deletes removed.
        let mut unsettled = Vec::new();
        for (p, start) in s.record.starts.iter().enumerate() {
            let p = p as u32;
            let head = self.head_now(tid, p);
            for o in *start..head.next {
                let passes = match self.facts.get(&(tid, p, o)) {
                    Some(e) => filter.passes(&self.events[e]),
                    None => filter == SimFilter::None,
                };
                let settled = acked.contains(&(p, o)) || dead.contains(&(p, o)) || maybe.contains(&(p, o));
                if !passes {
                    failing += 1;
                } else if o >= head.start && !settled && !s.removed_dead.contains_key(&(p, o)) {
                    unsettled.push(format!("{p}@{o}"));
                }
            }
        }
        if !s.removed_unknown && unsettled.len() as u64 > s.removed_count.saturating_sub(s.removed_dead.len() as u64) {
            unsettled.truncate(4);
            problems.push(format!(
                "{unsettled:?} pass {filter:?} and are in the log, but were never settled ({} dead letters removed)",
                s.removed_count
            ));
        }
        if b.filtered > failing {
            problems.push(format!("{} filtered, but only {failing} events fail {filter:?}", b.filtered));
        }
        if b.visible + b.in_flight + b.delayed + b.unscanned + b.scheduled != 0 {
            problems.push(format!("backlog not empty: {b:?}"));
        }
        if b.dead != dead.len() as u64 {
            problems.push(format!("dead counted {} but {} listed", b.dead, dead.len()));
        }
        // Dead letters purged or deleted count as settled, by the answers' counts; if an
        // answer was lost, how many went is unknown, and only the upper bound holds.
        let removed = s.removed_count;
        let unknown = s.removed_unknown;
        for m in s.removed_dead.keys().filter(|m| dead.contains(m)) {
            problems.push(format!("{}@{} removed from the dead letters, and listed there", m.0, m.1));
        }
        let accounted = acked.iter().filter(|k| !dead.contains(k)).count() as u64
            + dead.len() as u64
            + b.expired
            + b.filtered
            + removed;
        if accounted > total || (!unknown && accounted + (maybe.len() as u64) < total) {
            problems.push(format!(
                "{} acked (+{} perhaps) + {} dead + {} expired + {} filtered + {removed} removed = {accounted}, \
                 but {total} messages were published",
                acked.len(),
                maybe.len(),
                dead.len(),
                b.expired,
                b.filtered
            ));
        }
        *self.stats.entry("messages_filtered").or_default() += b.filtered;
        if !problems.is_empty() {
            self.violate("queue-exactly-once", format!("{sub}: {}", problems.join("; ")));
        }
    }

    /// The messages published to the subscription, and those acked (some also dead: a
    /// problem) or perhaps acked, by what the model saw.
    fn tally_settled(&self, tid: u64, sub_id: u64, dead: &Offsets) -> (u64, Offsets, Offsets, Vec<String>) {
        let s = &self.subs[&sub_id];
        let mut total = 0;
        let mut acked = BTreeSet::new();
        let mut maybe = BTreeSet::new();
        let mut problems = Vec::new();
        for (p, start) in s.record.starts.iter().enumerate() {
            let p = p as u32;
            let head = self.head_now(tid, p);
            total += head.next.saturating_sub(*start);
            for o in *start..head.next {
                let Some(m) = s.msgs.get(&(p, o)) else { continue };
                let last = m.deliveries.last().unwrap();
                if m.deliveries.iter().any(|d| d.acked_ok.is_some() && !d.ack_blind) {
                    acked.insert((p, o));
                    if dead.contains(&(p, o)) && last.acked_ok.is_some() {
                        problems.push(format!("{p}@{o} acked and dead"));
                    }
                } else if (last.ack_maybe || m.deliveries.iter().any(|d| d.acked_ok.is_some()))
                    && !dead.contains(&(p, o))
                {
                    // Acked, or (the ack lost) expired since: one or the other. Or an ok
                    // answered blind: acked, or a dead letter removed since.
                    maybe.insert((p, o));
                }
            }
        }
        (total, acked, maybe, problems)
    }
}
