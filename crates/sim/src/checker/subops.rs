//! The promises of SUB_QO's operator (`ops/subops.rs`, docs/API.md): a paused subscription
//! grants no lease to a receive that began after the pause answered; after a seek or purge
//! the leases it passed over are gone (their acks answer `stale_receipt`); the dead letters
//! stay through both; and, once all is quiet, a dry run's counts equal the real seek's,
//! which equal the model's count from the stores, and a seek back delivers exactly what it
//! counted.

use std::collections::BTreeSet;

use sluice_core::queues::{PartitionSeek, Queues, ReceiptError, ReceiveRequest, SeekTo};
use sluice_core::Clock;

use crate::model::{SimFilter, SimPatch};
use crate::world::{code, receipt_parts, stored_queue, Acks, Done, Held, World, SUB_QO, T0, TOPIC_A};

/// A receive's window at the quiet end: longer than the checks take.
const QUIET_WINDOW: u64 = 600_000;

impl World {
    /// Whether `sub_id` is SUB_QO's.
    pub(crate) fn operated(&self, sub_id: u64) -> bool {
        self.subs.get(&sub_id).is_some_and(|s| s.name == SUB_QO)
    }

    /// A message delivered by a receive that began after a pause answered, no resume since.
    pub(crate) fn check_paused(&mut self, d: &Done, sub_id: u64, p: u32, o: u64) {
        if self.operated(sub_id) && self.ops.surely_paused(d.start_seq, d.end_seq) {
            self.violate("paused-delivered", format!("{SUB_QO} {p}@{o} delivered while paused"));
        }
    }

    /// A message of SUB_QO delivered at its first count, its event timestamped by the log:
    /// not before its timestamp plus the shortest delay a take of it may have used (a
    /// change applies to what is taken from the log after it answered; nothing is taken
    /// before its event's timestamp).
    pub(crate) fn check_delayed(&mut self, d: &Done, sub_id: u64, p: u32, o: u64, count: u32) {
        let Some(tid) = self.live_topic_id(TOPIC_A).filter(|_| count == 1 && self.operated(sub_id)) else { return };
        let Some(info) = self.facts.get(&(tid, p, o)).map(|e| &self.events[e]) else { return };
        let Some(ts) = info.ts.filter(|_| info.ts_window.0 != i64::MIN) else { return };
        let floor = self.ops.delay_floor(ts);
        if floor > 0 {
            self.stat("delay_checked");
        }
        if d.end_ms < ts + floor as i64 {
            let detail = format!(
                "{SUB_QO} {p}@{o}: delivered by {}, published at {} with a delay of at least {floor}",
                d.end_ms - T0,
                ts - T0
            );
            self.violate("delay-early", detail);
        }
    }

    /// An ack answered ok for a lease a seek surely ended: received before the seek began,
    /// live as it ran (not out of deliveries: one that is, its window over, is the DLQ's and
    /// stays, and its window may have been changed since), settled by nothing before it
    /// ended, and its message not delivered again since.
    pub(crate) fn check_seek_stale(&mut self, d: &Done, held: &[Held], results: &Acks) {
        let tid = self.live_topic_id(TOPIC_A);
        for (h, r) in held.iter().zip(results) {
            if !self.operated(h.sub_id) {
                continue;
            }
            let s = &self.subs[&h.sub_id];
            let Some(m) = s.msgs.get(&(h.partition, h.offset)) else { continue };
            let Some(mine) = m.deliveries.iter().find(|x| x.nonce == h.nonce) else { continue };
            // Out of deliveries by the smallest limit that may have been in force since.
            let max = self.ops.max_receives(mine.start_seq, d.end_seq).1;
            if m.deliveries.iter().any(|x| x.start_seq > mine.start_seq) {
                continue;
            }
            // A message a filter passes over is done with: its ack answers ok
            // (`Queues::done_already` tells no acked message from it). A filter changed after
            // the seek may pass it over, and so may one set before it, judging the message
            // again once a seek back has put it ahead of the cursor (seed 1200): any filter
            // set before the ack that does not pass the message (or a message the model
            // does not know). The filter the subscription was made with passes everything.
            let event = tid.and_then(|t| self.facts.get(&(t, h.partition, h.offset))).map(|e| &self.events[e]);
            let refiltered = self
                .ops
                .filters
                .iter()
                .any(|c| c.start > 0 && c.start < d.end_seq && event.is_none_or(|e| !c.value.0.passes(e)));
            let ended = self.ops.sought.iter().find(|(start, end)| {
                !refiltered
                    && *start > mine.end_seq
                    && *end < d.start_seq
                    && mine.release_seq.is_none_or(|r| r > *end)
                    && mine.count < max
            });
            match (ended, r) {
                (Some(_), Err(_)) => self.stat("seek_stale_acks"),
                (Some((start, end)), Ok(())) => {
                    let detail = format!(
                        "{SUB_QO} {}@{}#{}: the ack of a lease the seek of seqs {start}..{end} passed over \
                         answered ok (received by seq {})",
                        h.partition, h.offset, mine.count, mine.end_seq
                    );
                    self.violate("seek-stale", detail);
                }
                (None, _) => {}
            }
        }
    }

    /// A listing of SUB_QO's dead letters names every one listed before.
    pub(crate) fn check_dead_kept(&mut self, listed: &BTreeSet<(u32, u64)>) {
        let gone: Vec<_> = self.ops.dead_seen.difference(listed).take(4).copied().collect();
        if !gone.is_empty() {
            self.violate("dlq-kept", format!("{SUB_QO}: dead letters {gone:?} listed before, gone now"));
        }
        self.ops.dead_seen.extend(listed.iter().copied());
    }

    /// The quiet end, before the queues are drained: SUB_QO resumed, then sought to a drawn
    /// position, purged and sought back to its start, each a dry run then for real, every
    /// answer equal to the model's count; the leases held across the first seek answer
    /// stale, a purged queue delivers nothing, the seek back delivers exactly what it
    /// counted, and the dead letters stay throughout.
    pub(crate) async fn check_operated_quiet(&mut self, queues: &Queues) {
        let Some(sub_id) = self.learn_sub(SUB_QO) else { return };
        if let Err(e) = queues.resume(TOPIC_A, SUB_QO).await {
            return self.violate("operator-quiet", format!("resume: {}", code(&e)));
        }
        // A change left to make is made; the rate goes (the quiet checks below receive all
        // there is at one instant; `check_rate_quiet` sets one of its own after them).
        let patch = SimPatch { rate: Some(None), ..self.ops.retry.take().unwrap_or_default() };
        if let Err(e) = queues.patch(TOPIC_A, SUB_QO, &patch.request()).await {
            return self.violate("operator-quiet", format!("patch: {}", code(&e)));
        }
        // Every window and delay of the run is over (a lease is held, or out of deliveries),
        // and every schedule is due: what the seeks count is delivered at once.
        let now = self.clock.now_ms();
        self.clock.advance(60_000.max(self.last_schedule().map_or(0, |at| at + 1 - now)));
        let Some(dead) = self.dead_listed(queues, SUB_QO).await else { return };
        self.check_dead_kept(&dead);
        let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: Some(QUIET_WINDOW) };
        let held: Vec<String> = match queues.receive(TOPIC_A, SUB_QO, &req).await {
            Ok(ms) => ms.into_iter().map(|m| m.receipt).collect(),
            Err(e) => return self.violate("operator-quiet", format!("receive: {}", code(&e))),
        };
        let first = self.draw_target();
        for (i, to) in [first, SeekTo::Latest, SeekTo::Earliest].into_iter().enumerate() {
            let Some(sought) = self.quiet_seek(queues, sub_id, &to, &held).await else { return };
            match i {
                0 => self.check_held_stale(queues, &held).await,
                1 => self.check_purged(queues).await,
                _ => self.check_sought_back(queues, sought).await,
            }
            let Some(dead) = self.dead_listed(queues, SUB_QO).await else { return };
            self.check_dead_kept(&dead);
        }
        if self.violation.is_none() {
            self.check_rate_quiet(queues).await;
        }
    }

    /// A dry run and the real seek, at one quiet instant: both answer the model's counts.
    /// The real seek's redeliver count, or `None` if a check failed.
    async fn quiet_seek(&mut self, queues: &Queues, sub_id: u64, to: &SeekTo, held: &[String]) -> Option<u64> {
        let want = self.model_seek(sub_id, to, held)?;
        let dry = queues.seek(TOPIC_A, SUB_QO, to, true).await;
        let real = queues.seek(TOPIC_A, SUB_QO, to, false).await;
        self.trace.line(format!("quiet seek {to:?}: model {want:?}"));
        match (dry, real) {
            (Ok(dry), Ok(real)) if dry.partitions == want && real.partitions == want && real.applied => {
                self.stat("quiet_seeks_exact");
                Some(real.redeliver)
            }
            (dry, real) => {
                let show = |r: Result<sluice_core::queues::Sought, sluice_core::Error>| {
                    r.map(|s| s.partitions.iter().map(|p| (p.from, p.to, p.redeliver, p.skip)).collect::<Vec<_>>())
                        .map_err(|e| code(&e))
                };
                let want: Vec<_> = want.iter().map(|p| (p.from, p.to, p.redeliver, p.skip)).collect();
                let detail = format!("to {to:?}: dry run {:?}, seek {:?}, model {want:?}", show(dry), show(real));
                self.violate("seek-exact", detail);
                None
            }
        }
    }

    /// Each partition's move as the model counts it from the stores, offset by offset:
    /// back over the messages done with (in no live lease) that pass the filter, forward
    /// over those still to deliver that pass it and over every live lease's message.
    fn model_seek(&mut self, sub_id: u64, to: &SeekTo, held: &[String]) -> Option<Vec<PartitionSeek>> {
        let tid = self.live_topic_id(TOPIC_A)?;
        let record = self.sub_now(TOPIC_A, SUB_QO)?;
        let filter = [SimFilter::None, SimFilter::Keys, SimFilter::KeyOrLongPad]
            .into_iter()
            .find(|f| f.pattern() == record.spec.filter)?;
        let max = record.spec.max_receive_count;
        let mine: BTreeSet<u64> = held.iter().filter_map(|r| receipt_parts(r)).map(|r| r.3).collect();
        let mut out = Vec::new();
        for p in 0..self.topic_specs[TOPIC_A].partitions {
            let head = self.head_now(tid, p);
            let (cursor, leases) = stored_queue(&self.mem, sub_id, p);
            let from = cursor.map_or(record.starts[p as usize], |c| c.next);
            // Out of deliveries and due (every window is over but the ones held here): the DLQ's.
            let live: BTreeSet<u64> = leases
                .iter()
                .filter(|l| l.receives < max || mine.contains(&l.nonce))
                .flat_map(|l| l.msgs.iter().map(|m| m.offset))
                .collect();
            let to = match to {
                SeekTo::Earliest => head.start,
                SeekTo::Latest => head.next,
                SeekTo::Offsets(os) => os[p as usize],
                SeekTo::Timestamp(ts) => (head.start..head.next)
                    .find(|o| self.facts.get(&(tid, p, *o)).and_then(|e| self.event_ts(*e)).is_some_and(|t| t >= *ts))
                    .unwrap_or(head.next),
            };
            let mut passes = |o: &u64| match self.facts.get(&(tid, p, *o)) {
                Some(e) => filter.passes(&self.events[e]),
                None => {
                    self.stat("quiet_seek_unknown_event");
                    filter == SimFilter::None
                }
            };
            let redeliver = (to.max(head.start)..from).filter(|o| !live.contains(o)).filter(&mut passes).count();
            let new = (from.max(head.start)..to).filter(&mut passes).count();
            let passed = live.iter().filter(|o| (head.start..to).contains(*o)).count();
            let (redeliver, skip) = (redeliver as u64, (new + passed) as u64);
            out.push(PartitionSeek { partition: p, from, to, redeliver, skip });
        }
        Some(out)
    }

    /// The receipts held across a seek answer stale.
    async fn check_held_stale(&mut self, queues: &Queues, held: &[String]) {
        if held.is_empty() {
            return;
        }
        match queues.ack(TOPIC_A, SUB_QO, held).await {
            Ok(rs) if rs.iter().all(|r| matches!(r, Err(ReceiptError::Stale))) => self.stat("quiet_stale_acks"),
            Ok(rs) => {
                let oks = rs.iter().filter(|r| r.is_ok()).count();
                self.violate("seek-stale", format!("{SUB_QO}: {oks} of {} leases passed over acked ok", rs.len()));
            }
            Err(e) => self.violate("operator-quiet", format!("ack: {}", code(&e))),
        }
    }

    /// A purged queue delivers nothing.
    async fn check_purged(&mut self, queues: &Queues) {
        let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: Some(QUIET_WINDOW) };
        match queues.receive(TOPIC_A, SUB_QO, &req).await {
            Ok(ms) if ms.is_empty() => {}
            Ok(ms) => {
                let got: Vec<_> = ms.iter().map(|m| (m.event.partition, m.event.offset)).collect();
                self.violate("purge-empty", format!("{SUB_QO}: a purged queue delivered {got:?}"));
            }
            Err(e) => self.violate("operator-quiet", format!("receive: {}", code(&e))),
        }
    }

    /// Back at the start of a purged queue: received and acked to the end, it delivers
    /// exactly the messages the seek counted, each once.
    async fn check_sought_back(&mut self, queues: &Queues, redeliver: u64) {
        let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: Some(QUIET_WINDOW) };
        let mut got = BTreeSet::new();
        for _ in 0..1000 {
            let ms = match queues.receive(TOPIC_A, SUB_QO, &req).await {
                Ok(ms) if ms.is_empty() => break,
                Ok(ms) => ms,
                Err(e) => return self.violate("operator-quiet", format!("receive: {}", code(&e))),
            };
            for m in &ms {
                if !got.insert((m.event.partition, m.event.offset)) {
                    let detail = format!("{}@{} delivered twice", m.event.partition, m.event.offset);
                    return self.violate("seek-exact", format!("{SUB_QO} sought back: {detail}"));
                }
            }
            let receipts: Vec<String> = ms.into_iter().map(|m| m.receipt).collect();
            if let Err(e) = queues.ack(TOPIC_A, SUB_QO, &receipts).await {
                return self.violate("operator-quiet", format!("ack: {}", code(&e)));
            }
        }
        if got.len() as u64 != redeliver {
            let detail = format!("a seek back counted {redeliver} to redeliver, {} were delivered", got.len());
            self.violate("seek-exact", format!("{SUB_QO}: {detail}"));
        }
    }
}
