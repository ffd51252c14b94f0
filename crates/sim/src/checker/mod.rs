//! The checker: the log's invariants over the stored truth, every event seen held against
//! the model, and the group and queue promises that answers of several capabilities share.

mod drain;
mod end;
mod fences;
mod push;
mod quiet;
mod rate;
mod schedule;
#[cfg(test)]
mod selftest;
mod subops;

use bytes::Bytes;
use std::collections::BTreeMap;

use sluice_core::keys::{dead_key, removed_dead_key};
use sluice_core::layout::{self, HeadRecord, SegmentRecord};
use sluice_core::queues::Ordering as KeyOrdering;
use sluice_core::segment::{decode_segment, Record};
use sluice_core::Clock;

use crate::model::{Delivery, SimFilter, SubModel};
use crate::world::{event_id, Done, World, SUB_Q, SUB_QO, T0, TOPIC_A, TOPIC_B};

impl World {
    /// The partition's true log: every event from the segment holding the log start to the head,
    /// checking on the way that the index tiles it and every indexed object exists.
    pub(crate) fn true_log(&mut self, topic_id: u64, partition: u32) -> (HeadRecord, BTreeMap<u64, Record>) {
        let head = self.head_now(topic_id, partition);
        let mut out = BTreeMap::new();
        let mut problems = Vec::new();
        let entries = self.entries(topic_id, partition, &mut problems);
        let mut expect: Option<u64> = None;
        let mut bytes = 0;
        for (base, seg, inline) in entries {
            if seg.next <= head.start {
                continue;
            }
            let overlap = self.tiles(expect, (base, seg.next), head.start, &mut problems);
            expect = expect.max(Some(seg.next));
            if base == head.start {
                self.first_segments.insert((topic_id, partition), (seg.next, seg.counted_bytes(), seg.max_ts));
            }
            if !overlap {
                bytes += seg.counted_bytes();
            }
            if !seg.parts.is_empty() {
                self.stat("checked_segments_in_parts");
            }
            let Some(bytes) = inline.or_else(|| self.objects.peek(&seg.object)) else {
                problems.push(format!("segment {base}..{} indexes object {} that is gone", seg.next, seg.object));
                continue;
            };
            for (delta, off, len) in seg.pieces() {
                let start = (seg.pos + off) as usize;
                let Some(part) = bytes.get(start..start + len as usize) else {
                    problems.push(format!("segment {base} reaches past its object"));
                    continue;
                };
                match decode_segment(&Bytes::copy_from_slice(part)) {
                    Ok(records) => {
                        for d in records {
                            // Overlapping items hold the same events: the first one read stands.
                            out.entry(base + delta + u64::from(d.offset_delta)).or_insert(d.record);
                        }
                    }
                    Err(e) => problems.push(format!("segment {base} part {delta}: {e}")),
                }
            }
        }
        if head.next > head.start && expect != Some(head.next) {
            problems.push(format!("index ends at {expect:?}, head at {}", head.next));
        }
        let dense = out.range(head.start..).map(|(o, _)| *o).eq(head.start..head.next.max(head.start));
        if !dense {
            problems.push(format!("events of {}..{} not dense", head.start, head.next));
        }
        if bytes != head.bytes {
            // The head counts each segment's bytes as published, a merged one's included
            // (`SegmentRecord::counted`). Retention whose removal of a segment lost to a merge of
            // it across the log start took its bytes off then and the merged segment's whole
            // later (seeds 1541, 1648, 1881, 2062; 3018 at 6,000 steps); it now removes the item
            // ending at the start in the head's write, so no merge crosses the start.
            self.violate(
                "head-bytes-exact",
                format!(
                    "topic {topic_id:x}/{partition}: the head counts {} bytes, its segments hold {bytes}",
                    head.bytes
                ),
            );
        }
        if !problems.is_empty() {
            self.violate("index-tiles", format!("topic {topic_id:x}/{partition}: {}", problems.join("; ")));
        }
        (head, out)
    }

    /// Whether the segment `base..next` overlaps the one before it (ending at `expect`), with
    /// what that says of how the index tiles the partition added to `problems`.
    fn tiles(&mut self, expect: Option<u64>, (base, next): (u64, u64), start: u64, problems: &mut Vec<String>) -> bool {
        match expect {
            None if base > start => problems.push(format!("first segment at {base} above start {start}")),
            // A stale committer's entry written out again over offsets a merge holds
            // (docs/DESIGN.md, "One partition, one write"): the same events, tolerated.
            // Never partly: merged with a neighbour, its bytes would be counted twice.
            Some(e) if base < e && next > e => {
                problems.push(format!("segment {base}..{next} overlaps the one before it, ending at {e}"))
            }
            Some(e) if base < e => self.stat("overlapping_index_items"),
            Some(e) if e != base => problems.push(format!("segment at {base} where {e} was expected")),
            _ => {}
        }
        expect.is_some_and(|e| base < e)
    }

    /// The partition's index entries by base: its index items, then the newest entry if the
    /// head carries it and the index does not hold it yet (the same bytes once written out).
    fn entries(
        &self,
        topic_id: u64,
        partition: u32,
        problems: &mut Vec<String>,
    ) -> Vec<(u64, SegmentRecord, Option<Bytes>)> {
        let mut entries = Vec::new();
        for item in self.mem.peek_all(&sluice_core::keys::segments_pk(topic_id, partition)) {
            let Ok(base) = sluice_core::keys::offset_of(&item.key.sk) else { continue };
            match layout::decode_segment_item(&item.value) {
                Ok((seg, inline)) => entries.push((base, seg, inline)),
                Err(_) => problems.push(format!("undecodable segment item at {base}")),
            }
        }
        if let Some(tail) = self.head_tail(topic_id, partition) {
            if entries.last().is_none_or(|(base, _, _)| *base < tail.base) {
                entries.push((tail.base, tail.record, Some(tail.data)));
            }
        }
        entries
    }

    /// Every invariant of the stored log, and every acknowledged event still in it.
    pub(crate) fn check_truth(&mut self) {
        // Every key the core wrote is one the registry knows (crates/core/src/keys/mod.rs).
        if let Some(key) = self.mem.keys().into_iter().find(|k| sluice_core::keys::kind_of(k).is_none()) {
            self.violate("unregistered-key", format!("{}/{} is no kind of item in the registry", key.pk, key.sk));
        }
        for name in [TOPIC_A, TOPIC_B] {
            let Some(tid) = self.live_topic_id(name) else { continue };
            for p in 0..self.topic_specs[name].partitions {
                if let Some(first) = self.first_segments.get(&(tid, p)) {
                    self.last_first_segments.insert((tid, p), *first);
                }
                let (head, log) = self.true_log(tid, p);
                for (o, record) in log.range(head.start..head.next) {
                    self.check_event(name, tid, p, *o, record, "truth");
                }
                let lost: Vec<(u64, u64)> = self
                    .acked
                    .range((tid, p, head.start)..(tid, p, head.next))
                    .filter(|(k, _)| !log.contains_key(&k.2))
                    .map(|(k, e)| (k.2, *e))
                    .collect();
                if let Some((o, e)) = lost.first() {
                    self.violate("never-lost", format!("{name}/{p}: acked event {e} at {o} is not in the log"));
                }
                let gone_too_far: Vec<u64> =
                    self.acked.range((tid, p, head.next)..(tid, p, u64::MAX)).map(|(k, _)| k.2).collect();
                if let Some(o) = gone_too_far.first() {
                    self.violate("never-lost", format!("{name}/{p}: acked offset {o} is past the head {}", head.next));
                }
                if let Some(bytes) = self.topic_specs[name].retention_bytes {
                    self.check_size_retention(name, tid, p, &head, bytes as u64);
                }
                // Time retention takes only segments whose newest event is past it.
                if let (Some(ms), None) = (self.topic_specs[name].retention_ms, self.topic_specs[name].retention_bytes)
                {
                    let now = self.clock.now_ms();
                    let early: Vec<(u64, i64)> = self
                        .facts
                        .range((tid, p, 0)..(tid, p, head.start))
                        .filter_map(|(k, e)| self.event_ts(*e).map(|ts| (k.2, ts)))
                        .filter(|(_, ts)| *ts >= now - ms)
                        .collect();
                    if let Some((o, ts)) = early.first() {
                        self.violate(
                            "retention-early",
                            format!(
                                "{name}/{p}: offset {o} (ts {ts}) removed before its time (now {now}, retention {ms})"
                            ),
                        );
                    }
                }
            }
        }
    }

    /// Size retention removes no more than its bound needs: the segment it removed last went
    /// while the partition held more than the bound (by the head's count, which retention
    /// reads), so what is left plus it is still more; unless time retention took it. Known
    /// when the last check saw that segment first in the log and the start is now its end
    /// (a compaction merges from the log start on, so no merged segment ends there).
    fn check_size_retention(&mut self, name: &str, tid: u64, p: u32, head: &HeadRecord, bound: u64) {
        let Some(&(next, len, max_ts)) = self.last_first_segments.get(&(tid, p)) else { return };
        if next != head.start {
            return;
        }
        let expired = self.topic_specs[name].retention_ms.is_some_and(|ms| max_ts < self.clock.now_ms() - ms);
        if !expired && head.bytes + len <= bound {
            self.violate(
                "retention-size-excess",
                format!(
                    "{name}/{p}: the segment below the log start {} ({len} bytes) went, leaving {} of a bound of {bound}",
                    head.start, head.bytes
                ),
            );
        }
    }

    pub(crate) fn event_ts(&self, e: u64) -> Option<i64> {
        self.events.get(&e).and_then(|i| i.ts)
    }

    /// An event seen at (topic id, partition, offset): it must be one that was published to
    /// this topic, to a partition it may land on, with its content, never refused, and the
    /// only one ever seen at this offset; and (idempotent or not) seen at one offset only.
    pub(crate) fn check_event(
        &mut self,
        topic: &'static str,
        tid: u64,
        p: u32,
        offset: u64,
        record: &Record,
        source: &str,
    ) {
        let Some(e) = event_id(&record.value) else {
            self.violate("replay-content", format!("{source}: {topic}/{p}@{offset}: not an event of the sim"));
            return;
        };
        let Some(info) = self.events.get(&e) else {
            self.violate("replay-content", format!("{source}: {topic}/{p}@{offset}: unknown event {e}"));
            return;
        };
        let mut problems = Vec::new();
        if info.topic != topic {
            problems.push(format!("published to {}", info.topic));
        }
        if info.key != record.key || info.value != record.value {
            problems.push("content differs".to_owned());
        }
        match info.ts {
            Some(ts) if ts != record.timestamp_ms => {
                problems.push(format!("timestamp {} != {ts}", record.timestamp_ms))
            }
            None if record.timestamp_ms < info.ts_window.0 || record.timestamp_ms > info.ts_window.1 => problems
                .push(format!("default timestamp {} outside the publish {:?}", record.timestamp_ms, info.ts_window)),
            _ => {}
        }
        if let Some(want) = info.partition {
            if want != p {
                problems.push(format!("belongs on partition {want}"));
            }
        }
        problems.extend(self.sched_problem(e, record));
        let info = &self.events[&e];
        let refused = info.refused;
        let idempotent = info.idempotent;
        if !problems.is_empty() {
            self.violate(
                "replay-content",
                format!("{source}: {topic}/{p}@{offset}: event {e}: {}", problems.join(", ")),
            );
        }
        if refused {
            self.violate("refused-applied", format!("{source}: {topic}/{p}@{offset}: event {e} of a refused publish"));
        }
        if self.events.get(&e).is_some_and(|i| i.ts.is_none()) {
            self.events.get_mut(&e).unwrap().ts = Some(record.timestamp_ms);
        }
        match self.facts.get(&(tid, p, offset)) {
            Some(&other) if other != e => self
                .violate("offset-unique", format!("{source}: {topic}/{p}@{offset} holds event {e}, earlier {other}")),
            Some(_) => {}
            None => {
                self.facts.insert((tid, p, offset), e);
            }
        }
        match self.placed.get(&(tid, e)) {
            Some(&(p2, o2)) if (p2, o2) != (p, offset) => {
                let property = if idempotent { "idempotent-once" } else { "event-once" };
                self.violate(property, format!("{source}: event {e} at {topic}/{p}@{offset} and at {p2}@{o2}"))
            }
            Some(_) => {}
            None => {
                self.placed.insert((tid, e), (p, offset));
            }
        }
    }

    /// Every offset below `value` on `partition` was delivered to a member, excused by a seek,
    /// or removed by retention: a committed offset never skips an event (at least once).
    pub(crate) fn check_coverage(&mut self, partition: u32, value: u64, what: &str) {
        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
        let start = self.head_now(tid, partition).start;
        let floor = start.max(self.group.excused_below.get(&partition).copied().unwrap_or(0));
        let delivered = self.group.delivered.get(&partition);
        let missing: Vec<u64> = (floor..value).filter(|o| delivered.is_none_or(|s| !s.contains(o))).take(8).collect();
        if !missing.is_empty() {
            let property = if self.group.lossy_polls > 0 { "group-skip-documented" } else { "group-at-least-once" };
            self.violate(
                property,
                format!("{what}: committed {value} on {partition}, never delivered: {missing:?} (log start {start})"),
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_delivery(
        &mut self,
        d: &Done,
        sub_id: u64,
        p: u32,
        o: u64,
        nonce: u64,
        count: u32,
        visibility: u64,
    ) {
        let facts_key = self.live_topic_id(TOPIC_A).map(|tid| (tid, p));
        let s = self.subs.get(&sub_id).unwrap();
        let max = self.receive_ceiling(s, d);
        let ordered = s.record.spec.ordering == KeyOrdering::Key;
        let start = s.record.starts.get(p as usize).copied().unwrap_or(0);
        let redriven = s.redrives_in_flight > 0 || s.redrive_seqs.iter().any(|r| *r < d.end_seq);
        let mut problems: Vec<(&'static str, String)> = Vec::new();
        if o < start {
            problems.push(("queue-range", format!("offset {o} below the start {start}")));
        }
        if count == 0 || count > max {
            problems.push(("receive-count", format!("receive count {count} (max {max})")));
        }
        problems.extend(self.content_problems(sub_id, d, p, o));
        // A seek since may have ended an earlier lease, the message new again (count 1, acked or not).
        let sought = |prev: &&Delivery| s.name == SUB_QO && self.ops.seek_between(prev.start_seq, d.end_seq);
        if let Some(m) = s.msgs.get(&(p, o)) {
            for prev in m.deliveries.iter().filter(|prev| !sought(prev) || prev.nonce == nonce) {
                if prev.nonce == nonce {
                    problems.push(("two-holders", format!("delivery {nonce:x} handed out twice")));
                    continue;
                }
                if let Some(detail) = two_holders(prev, d, count, visibility, redriven) {
                    problems.push(("two-holders", detail));
                }
                if prev.acked_ok.is_some() {
                    problems.push(("acked-redelivered", format!("delivered #{count} after #{} was acked", prev.count)));
                }
                if !redriven && count <= prev.count && prev.end_seq < d.start_seq {
                    problems.push(("receive-count", format!("delivered #{count} after #{}", prev.count)));
                }
            }
        }
        // Key order: every earlier message of its key is done (acked, or dead) first.
        if ordered {
            if let Some((tid, _)) = facts_key {
                for o1 in self.key_undone(s, d, tid, p, o) {
                    problems.push(("key-order", format!("{p}@{o} delivered before {o1} of the same key was done")));
                }
            }
        }
        for (property, detail) in problems {
            self.violate(property, format!("sub {sub_id:x} {p}@{o}: {detail}"));
        }
        let s = self.subs.get_mut(&sub_id).unwrap();
        s.msgs.entry((p, o)).or_default().deliveries.push(Delivery {
            nonce,
            count,
            start_seq: d.start_seq,
            end_seq: d.end_seq,
            until_lo: d.start_ms + visibility as i64,
            end_ms: d.end_ms,
            release_seq: None,
            ack_seq: None,
            acked_ok: None,
            ack_blind: false,
            ack_durable: 0,
            ack_maybe: false,
        });
    }

    /// The receive limit a delivery may have had: SUB_QO's may have changed as it ran, and
    /// the largest that may have been in force holds.
    fn receive_ceiling(&self, s: &SubModel, d: &Done) -> u32 {
        match s.name {
            SUB_QO => self.ops.max_receives(d.start_seq, d.end_seq).0,
            _ => s.record.spec.max_receive_count,
        }
    }

    /// A delivery of `p@o` that must not be at all: its event fails the filter, or its dead
    /// letter was removed before the receive began.
    fn content_problems(&self, sub_id: u64, d: &Done, p: u32, o: u64) -> Vec<(&'static str, String)> {
        let s = &self.subs[&sub_id];
        let facts_key = self.live_topic_id(TOPIC_A).map(|tid| (tid, p));
        let mut problems = Vec::new();
        let filter = match s.name {
            SUB_Q => self.q_filter,
            // SUB_QO's filter where it surely applies: a change answered before the receive
            // began (no other since), and an offset past the heads at its answer.
            SUB_QO => match self.ops.filter_at(d.start_seq, d.end_seq) {
                Some((f, heads)) if heads.get(p as usize).is_none_or(|h| o >= *h) => *f,
                _ => SimFilter::None,
            },
            _ => SimFilter::None,
        };
        if let Some(event) = facts_key.and_then(|(tid, _)| self.facts.get(&(tid, p, o))).map(|e| &self.events[e]) {
            if !filter.passes(event) {
                problems.push(("filtered-delivered", format!("delivered, but {filter:?} does not pass it")));
            }
        }
        if let Some(removed) = s.removed_dead.get(&(p, o)).filter(|r| **r < d.start_seq) {
            problems.push((
                "dlq-removed-delivered",
                format!("delivered after its dead letter was removed (seq {removed})"),
            ));
        }
        problems
    }

    /// The earlier offsets of the key of `p@o` not done (acked, or dead) when its delivery was seen.
    fn key_undone(&self, s: &SubModel, d: &Done, tid: u64, p: u32, o: u64) -> Vec<u64> {
        let max = s.record.spec.max_receive_count;
        let start = s.record.starts.get(p as usize).copied().unwrap_or(0);
        let key = self.facts.get(&(tid, p, o)).and_then(|e| self.events[e].key.clone());
        let log_start = self.head_now(tid, p).start;
        let Some(key) = key else { return Vec::new() };
        let from = start.max(log_start).min(o);
        let earlier: Vec<u64> = self
            .facts
            .range((tid, p, from)..(tid, p, o))
            .filter(|(_, e)| self.events[e].key.as_ref() == Some(&key) && schedule::holds_key(&self.events[e]))
            .map(|(k, _)| k.2)
            .collect();
        earlier
            .into_iter()
            .filter(|o1| {
                let m = s.msgs.get(&(p, *o1));
                let acked = m.is_some_and(|m| m.deliveries.iter().any(|x| x.ack_seq.is_some_and(|r| r < d.end_seq)));
                // Deliveries nobody saw (lost receives) count towards the dead letter too.
                let (count, since) = m.and_then(|m| m.deliveries.last()).map_or((0, 0), |x| (x.count, x.start_seq));
                let unseen = s.lost_receives.iter().filter(|e| **e > since && **e < d.end_seq).count() as u32;
                // A receive answers what it took on other partitions when a take's write has an
                // unknown outcome: that take's deliveries nobody saw are in no lost receive, so
                // the store says whether they made the message a dead letter (kept or removed).
                let dead = || {
                    let id = s.record.id;
                    self.mem.peek(&dead_key(id, p, *o1)).is_some()
                        || self.mem.peek(&removed_dead_key(id, p, *o1)).is_some()
                };
                let done = acked || count + unseen >= max || dead();
                !done
            })
            .collect()
    }
}

/// How `prev` and a delivery `d` of the same message (#`count`, its window `visibility`) had
/// two holders at once, if they surely did: the delivery taken first still held the message
/// when the other's receive answered. Answers need not come in the order of the takes (a
/// receive answers a window of 0 after it ended, `answerable`): of two overlapping receives,
/// the lower count was taken first (no seek or redrive between: the caller's filter, `redriven`).
fn two_holders(prev: &Delivery, d: &Done, count: u32, visibility: u64, redriven: bool) -> Option<String> {
    if count < prev.count && !redriven && prev.end_seq > d.start_seq {
        let until = d.start_ms + visibility as i64;
        let (answered, until_t) = (prev.end_ms - T0, until - T0);
        return (prev.end_ms < until)
            .then(|| format!("#{} answered at {answered} while #{count} held it until {until_t}", prev.count));
    }
    let held = d.end_ms < prev.until_lo && prev.release_seq.is_none_or(|r| r > d.end_seq);
    let (until, now) = (prev.until_lo - T0, d.end_ms - T0);
    held.then(|| format!("delivered #{count} while #{} holds it until at least {until} (now {now})", prev.count))
}
