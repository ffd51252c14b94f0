//! The work queues' operations: workers' receives, acks, nacks and visibility changes, and
//! the admin's describes, redrives, dead letters and subscription changes.

use std::collections::BTreeSet;

use sluice_core::queues::{Queues, ReceiptError, ReceiveRequest};
use sluice_core::{Clock, Error};

use crate::world::{
    code, receipt_parts, uncertain, Acks, Act, Done, Held, Kind, Res, SettleHow, World, SUB_Q, SUB_QK, SUB_QO, T0,
    TOPIC_A,
};

impl World {
    pub(crate) fn start_queue_admin(&mut self, c: usize, queues: Queues) {
        let sub = if self.rng.chance(0.7) { SUB_Q } else { SUB_QK };
        match self.rng.weighted(&[5, 2, 2, 1, 1, 1, 1]) {
            0 => self.spawn(c, Act::QDescribe { sub }, Some(TOPIC_A), async move {
                Res::QDescribe(Box::new(queues.describe(TOPIC_A, sub).await))
            }),
            1 if sub == SUB_Q => {
                self.redrive_started(sub);
                self.spawn(c, Act::Redrive { sub }, Some(TOPIC_A), async move {
                    Res::Count(queues.redrive(TOPIC_A, sub, None).await)
                })
            }
            2 => self.spawn(c, Act::DeadLetters { sub }, Some(TOPIC_A), async move {
                Res::Dlq(queues.dead_letters(TOPIC_A, sub, None, 1000).await)
            }),
            3 => self.spawn(c, Act::SubDelete { sub: SUB_Q }, Some(TOPIC_A), async move {
                Res::Unit(queues.delete(TOPIC_A, SUB_Q).await)
            }),
            4 => {
                let spec = self.sub_specs[SUB_Q].clone();
                self.spawn(c, Act::SubCreate { sub: SUB_Q }, Some(TOPIC_A), async move {
                    Res::SubCreate(Box::new(queues.create(TOPIC_A, SUB_Q, spec).await))
                })
            }
            5 => self.spawn(c, Act::DlqPurge { sub }, Some(TOPIC_A), async move {
                Res::Count(queues.purge_dead_letters(TOPIC_A, sub).await)
            }),
            _ => {
                // One of the dead letters the latest listing named (or one never dead).
                let listed: Vec<(u32, u64)> = self
                    .subs
                    .values()
                    .filter(|s| s.name == sub)
                    .flat_map(|s| s.listed_dead.1.iter().copied())
                    .collect();
                let (partition, offset) = if listed.is_empty() { (0, 0) } else { *self.rng.pick(&listed) };
                let id = format!("{partition}-{offset}");
                self.spawn(c, Act::DlqDelete { sub, partition, offset }, Some(TOPIC_A), async move {
                    Res::Unit(queues.delete_dead_letter(TOPIC_A, sub, &id).await)
                })
            }
        }
    }

    pub(crate) fn on_redrive(&mut self, sub: &'static str) {
        for s in self.subs.values_mut().filter(|s| s.name == sub) {
            s.redrives_in_flight = s.redrives_in_flight.saturating_sub(1);
        }
    }

    pub(crate) fn on_sub_create(&mut self, d: &Done, sub: &'static str) {
        if matches!(&d.res, Res::SubCreate(r) if r.is_ok()) {
            self.learn_sub(sub);
        }
    }

    pub(crate) fn redrive_started(&mut self, sub: &'static str) {
        let seq = self.seq + 1;
        for s in self.subs.values_mut().filter(|s| s.name == sub) {
            s.redrives_in_flight += 1;
            s.redrive_seqs.push(seq);
        }
    }

    pub(crate) fn start_worker(
        &mut self,
        c: usize,
        sub: &'static str,
        holding: &mut Vec<Held>,
        slow: bool,
        queues: Queues,
    ) {
        let busy_hands = holding.len();
        let choice =
            if busy_hands == 0 { 0 } else { self.rng.weighted(&[if busy_hands < 6 { 3 } else { 0 }, 5, 1, 1]) };
        if slow && choice != 0 && self.rng.chance(0.5) {
            return; // a slow handler: still working on what it holds
        }
        if choice == 0 {
            let (req, visibility) = self.receive_request(c, sub);
            self.spawn(c, Act::Receive { sub, visibility }, Some(TOPIC_A), async move {
                Res::Receive(queues.receive(TOPIC_A, sub, &req).await)
            });
            return;
        }
        let n = self.rng.range(1, holding.len() as i64) as usize;
        let mut held = Vec::new();
        for _ in 0..n {
            let i = self.rng.below(holding.len() as u64) as usize;
            held.push(holding.remove(i));
        }
        let receipts: Vec<String> = held.iter().map(|h| h.receipt.clone()).collect();
        let how = match choice {
            1 => SettleHow::Ack,
            2 => SettleHow::Nack(if self.rng.chance(0.5) { 0 } else { self.rng.range(1, 2000) as u64 }),
            _ => SettleHow::Visibility(if self.rng.chance(0.2) { 0 } else { self.rng.range(500, 8000) as u64 }),
        };
        // The release-like ops mark their deliveries before they start.
        let seq = self.seq + 1;
        for h in &held {
            if let Some(d) = self.delivery_mut(h) {
                if matches!(how, SettleHow::Ack | SettleHow::Nack(_) | SettleHow::Visibility(0)) {
                    d.release_seq.get_or_insert(seq);
                }
                if how == SettleHow::Ack {
                    d.ack_seq.get_or_insert(seq);
                }
            }
        }
        if let SettleHow::Visibility(v) = how {
            let lo = self.clock.now_ms() + v as i64;
            for h in &held {
                if let Some(d) = self.delivery_mut(h) {
                    // The new window ends at least here, but the change may not apply at all.
                    d.until_lo = d.until_lo.min(lo);
                }
            }
        }
        if how == SettleHow::Ack && self.rng.chance(0.4) {
            let (req, visibility) = self.receive_request(c, sub);
            self.spawn(c, Act::AckNext { sub, visibility, held }, Some(TOPIC_A), async move {
                Res::AckNext(queues.ack_and_receive(TOPIC_A, sub, &receipts, &req).await)
            });
            return;
        }
        let act = Act::Settle { sub, how, held };
        self.spawn(c, act, Some(TOPIC_A), async move {
            match how {
                SettleHow::Ack => Res::Acks(queues.ack(TOPIC_A, sub, &receipts).await),
                SettleHow::Nack(d) => Res::Acks(queues.nack(TOPIC_A, sub, &receipts, d).await),
                SettleHow::Visibility(v) => Res::Vis(queues.change_visibility(TOPIC_A, sub, &receipts, v).await),
            }
        });
    }

    /// A worker's receive: up to 5 messages, a long poll now and then, its own visibility
    /// timeout now and then (on a seed of zero windows, a short one is 0); with the window
    /// it asks for.
    pub(crate) fn receive_request(&mut self, c: usize, sub: &'static str) -> (ReceiveRequest, u64) {
        let own = self.rng.chance(0.3).then(|| self.rng.range(500, 6000) as u64);
        let own = own.map(|v| if v < 1000 && self.zero_windows() { 0 } else { v });
        let req = ReceiveRequest {
            max_messages: self.rng.range(1, 5) as usize,
            wait_ms: self.long_wait(c, 0.3, 1500),
            visibility_timeout_ms: own,
        };
        (req, own.unwrap_or(self.sub_specs[sub].visibility_timeout_ms))
    }

    pub(crate) fn receive_lost(&mut self, sub: &'static str, end_seq: u64) {
        for s in self.subs.values_mut().filter(|s| s.name == sub) {
            s.lost_receives.push(end_seq);
        }
    }

    pub(crate) fn on_receive(&mut self, d: &Done, sub: &'static str, visibility: u64) {
        let Res::Receive(r) = &d.res else { return self.receive_lost(sub, d.end_seq) };
        // SUB_QO's window may have changed while the receive ran: the shortest it may have had.
        let visibility =
            if sub == SUB_QO { visibility.min(self.ops.window_floor(d.start_seq, d.end_seq)) } else { visibility };
        match r {
            Ok(messages) => {
                if visibility > 0 && d.end_ms - d.start_ms >= visibility as i64 {
                    // Takes whose window ended before the answer are left out of it: deliveries
                    // nobody saw, which count towards a dead letter as a lost receive's do.
                    // A window of 0 ends at once, and its messages are answered all the same.
                    self.receive_lost(sub, d.end_seq);
                }
                if sub == SUB_QO {
                    self.check_rate(d, messages.len());
                }
                let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
                for m in messages {
                    self.stat("messages_received");
                    let Some((sub_id, p, o, nonce, count)) = receipt_parts(&m.receipt) else {
                        self.violate("receive-answer", "a receipt that does not decode".into());
                        continue;
                    };
                    if p != m.event.partition || o != m.event.offset || count != m.receive_count {
                        self.violate(
                            "receive-answer",
                            format!(
                                "receipt names {p}@{o}#{count}, message {}@{}#{}",
                                m.event.partition, m.event.offset, m.receive_count
                            ),
                        );
                    }
                    self.check_event(TOPIC_A, tid, p, o, &m.event.record, "receive");
                    self.check_not_early(sub, p, o, &m.event.record, d.end_ms);
                    if !self.subs.contains_key(&sub_id) && self.learn_sub(sub).is_none_or(|id| id != sub_id) {
                        // A subscription deleted meanwhile that we never described: nothing to hold it to.
                        continue;
                    }
                    self.check_paused(d, sub_id, p, o);
                    self.check_delayed(d, sub_id, p, o, count);
                    self.check_delivery(d, sub_id, p, o, nonce, count, visibility);
                    if let Kind::Worker { holding, .. } = &mut self.clients[d.client].kind {
                        holding.push(Held {
                            receipt: m.receipt.clone(),
                            sub_id,
                            partition: p,
                            offset: o,
                            nonce,
                            count,
                        });
                    }
                }
            }
            Err(Error::OffsetOutOfRange { .. }) => {
                self.violate("transient-416", format!("receive on {sub}: {}", code(r.as_ref().unwrap_err())))
            }
            Err(e) if uncertain(e) => self.receive_lost(sub, d.end_seq),
            Err(Error::SubscriptionNotFound { .. }) => {}
            Err(e) => {
                let c = code(e);
                if !c.contains("busy") && !c.contains("contended") {
                    self.violate("receive-refused", c);
                }
            }
        }
    }

    pub(crate) fn on_settle(&mut self, d: &Done, _sub: &'static str, how: SettleHow, held: &[Held]) {
        let results: Vec<Option<bool>> = match &d.res {
            Res::Acks(Ok(rs)) => rs.iter().map(|r| Some(r.is_ok())).collect(),
            Res::Vis(Ok(rs)) => rs.iter().map(|r| Some(r.is_ok())).collect(),
            Res::Acks(Err(Error::SubscriptionNotFound { .. })) | Res::Vis(Err(Error::SubscriptionNotFound { .. })) => {
                vec![Some(false); held.len()]
            }
            // Unknown: may or may not have applied.
            _ => vec![None; held.len()],
        };
        if let (SettleHow::Ack, Res::Acks(Ok(rs))) = (how, &d.res) {
            self.check_ack_refusals(d, held, rs);
            self.check_seek_stale(d, held, rs);
        }
        let (mut keep, mut unheld) = (Vec::new(), 0);
        let durable = self.mem.durable_count();
        for (h, r) in held.iter().zip(results) {
            let now = d.start_ms;
            let alone = self.alone_since(h, d.end_seq);
            let Some(dl) = self.delivery_mut(h) else { continue };
            match (how, r) {
                (SettleHow::Ack, Some(true)) => {
                    // Surely held as the ack began: no release-like op but acks before it, and
                    // the window not over, or nobody could have received it since and its
                    // count keeps it out of the DLQ. Otherwise the ok may be a removed dead
                    // letter's.
                    let held = dl.release_seq == dl.ack_seq && (now < dl.until_lo || alone);
                    unheld += u64::from(!held);
                    dl.ack_blind = dl.acked_ok.is_none_or(|_| dl.ack_blind) && !held;
                    dl.acked_ok = Some(d.end_seq);
                    dl.ack_durable = durable;
                }
                (SettleHow::Ack, None) => {
                    dl.ack_maybe = true;
                    keep.push(h.clone());
                }
                (SettleHow::Visibility(v), Some(true)) if v > 0 => {
                    dl.until_lo = now + v as i64;
                    keep.push(h.clone());
                }
                (SettleHow::Visibility(v), None) if v > 0 => keep.push(h.clone()),
                (SettleHow::Nack(_) | SettleHow::Visibility(_), None) => keep.push(h.clone()),
                _ => {}
            }
        }
        *self.stats.entry("acks_ok_unheld").or_default() += unheld;
        // What it still holds (or may): it retries those later.
        if let Kind::Worker { holding, .. } = &mut self.clients[d.client].kind {
            if how != SettleHow::Ack || self.rng.chance(0.8) {
                holding.extend(keep);
            }
        }
    }

    /// Whether nobody but the holder of `h` can have received its message by `seq`: no later
    /// delivery seen, no receive answer lost since, and fewer receives than would bury it.
    fn alone_since(&self, h: &Held, seq: u64) -> bool {
        let Some(s) = self.subs.get(&h.sub_id) else { return false };
        let Some(m) = s.msgs.get(&(h.partition, h.offset)) else { return false };
        let Some(mine) = m.deliveries.iter().find(|d| d.nonce == h.nonce) else { return false };
        let later = m.deliveries.iter().any(|d| d.start_seq > mine.start_seq && d.start_seq < seq);
        let lost = s.lost_receives.iter().any(|r| *r > mine.start_seq);
        let max = match s.name {
            SUB_QO => self.ops.max_receives(mine.start_seq, seq).1,
            _ => s.record.spec.max_receive_count,
        };
        !later && !lost && mine.count < max
    }

    /// An ack refused as stale must be of a receipt that was: a delivery whose window may
    /// have ended before the ack was done, one settled by an earlier op (an ack, a nack, a
    /// release), or one of a subscription deleted since. A refusal of a receipt surely still
    /// held, the subscription live throughout, is a broken promise (the holder's ack lost).
    pub(crate) fn check_ack_refusals(&mut self, d: &Done, held: &[Held], results: &Acks) {
        let sub_deletes = self.inflight.values().any(|op| matches!(op.act, Act::SubDelete { .. }));
        for (h, r) in held.iter().zip(results) {
            if !matches!(r, Err(ReceiptError::Stale)) || sub_deletes {
                continue;
            }
            let Some(name) = self.subs.get(&h.sub_id).map(|s| s.name) else { continue };
            if self.sub_now(TOPIC_A, name).is_none_or(|r| r.id != h.sub_id) {
                continue;
            }
            let end_ms = d.end_ms;
            let start_seq = d.start_seq;
            let operated = self.operated(h.sub_id);
            // A seek that may have applied since the delivery ended its lease.
            let delivered = self.delivery_mut(h).map(|dl| dl.start_seq);
            if delivered.is_none_or(|start| operated && self.ops.seek_between(start, d.end_seq)) {
                continue;
            }
            let Some(dl) = self.delivery_mut(h) else { continue };
            let first_settle = dl.release_seq.is_none_or(|r| r >= start_seq);
            if first_settle && end_ms < dl.until_lo {
                let until = dl.until_lo - T0;
                self.violate(
                    "ack-refused",
                    format!(
                        "sub {:x} {}@{}: the holder's ack (done by {}) refused, its window lasting until at least {until}",
                        h.sub_id,
                        h.partition,
                        h.offset,
                        end_ms - T0
                    ),
                );
            }
        }
    }

    /// Acks riding on a receive: checked as an ack and a receive over the same span, the
    /// acks applied no later than the receive's write. A failure leaves both unknown (the
    /// acks may have ridden on a write, or not), but for a subscription not found.
    pub(crate) fn on_ack_next(&mut self, d: Done, sub: &'static str, visibility: u64, held: &[Held]) {
        let Done { client, act, start_seq, end_seq, start_ms, end_ms, topic0, touch0, res } = d;
        let (acks, received) = match res {
            Res::AckNext(Ok((acks, messages))) => (Res::Acks(Ok(acks)), Res::Receive(Ok(messages))),
            Res::AckNext(Err(e @ Error::SubscriptionNotFound { .. })) => {
                let again = Error::SubscriptionNotFound { topic: TOPIC_A.into(), subscription: sub.into() };
                (Res::Acks(Err(again)), Res::Receive(Err(e)))
            }
            Res::AckNext(Err(e)) => (Res::Crashed, Res::Receive(Err(e))),
            _ => (Res::Crashed, Res::Crashed),
        };
        let part = |res| Done { client, act: act.clone(), start_seq, end_seq, start_ms, end_ms, topic0, touch0, res };
        self.on_settle(&part(acks), sub, SettleHow::Ack, held);
        self.on_receive(&part(received), sub, visibility);
    }

    pub(crate) fn on_dead_letters(&mut self, d: &Done, sub: &'static str) {
        let Res::Dlq(Ok(page)) = &d.res else { return };
        let mut seen = BTreeSet::new();
        for e in &page.entries {
            if !seen.insert((e.partition, e.offset)) {
                self.violate("dlq-once", format!("{sub}: dead letter {} listed twice", e.id));
            }
        }
        let live = self.sub_now(TOPIC_A, sub).map(|r| r.id);
        if sub == SUB_QO {
            self.check_dead_kept(&seen);
        }
        if let Some(s) = live.and_then(|id| self.subs.get_mut(&id)) {
            s.listed_dead = (d.start_seq, seen);
        }
    }

    /// A purge (`one`: None) or a delete of one dead letter. Answered ok, what it removed is
    /// gone for good: the one deleted, or every dead letter a listing named before the purge
    /// began, unless a redrive since may have moved it back first.
    pub(crate) fn on_dlq_removal(&mut self, d: &Done, sub: &'static str, one: Option<(u32, u64)>) {
        let Some(sub_id) = self.sub_now(TOPIC_A, sub).map(|r| r.id) else { return };
        let Some(s) = self.subs.get_mut(&sub_id) else { return };
        let n = match (&d.res, one) {
            (Res::Count(Ok(n)), None) => *n,
            (Res::Unit(Ok(())), Some(_)) => 1,
            (Res::Count(Err(e)) | Res::Unit(Err(e)), _) if !uncertain(e) => return,
            _ => {
                s.removed_unknown = true;
                return;
            }
        };
        self.stat(if one.is_some() { "dead_letters_deleted" } else { "dead_letter_purges" });
        let s = self.subs.get_mut(&sub_id).unwrap();
        s.removed_count += n;
        let removed: Vec<(u32, u64)> = match one {
            Some(m) => vec![m],
            None => {
                let (listed_at, listed) = &s.listed_dead;
                let redriven = s.redrives_in_flight > 0 || s.redrive_seqs.iter().any(|r| r > listed_at);
                if redriven || *listed_at == 0 {
                    Vec::new()
                } else {
                    listed.iter().copied().collect()
                }
            }
        };
        for m in removed {
            s.removed_dead.entry(m).or_insert(d.end_seq);
        }
    }
}
