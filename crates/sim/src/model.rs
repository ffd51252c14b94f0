//! The model: what the checker knows of the events, requests, group and subscriptions the
//! clients published and used, and the model's own answer to SUB_Q's content filter.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use sluice_core::groups::TopicPartition;
use sluice_core::queues::{Rate, SubscriptionPatch, SubscriptionRecord};
use sluice_core::Position;

use crate::rng::Rng;

pub(crate) struct EventInfo {
    pub(crate) topic: &'static str,
    pub(crate) key: Option<Bytes>,
    pub(crate) ts: Option<i64>,
    pub(crate) ts_window: (i64, i64),
    pub(crate) value: Bytes,
    pub(crate) partition: Option<u32>,
    pub(crate) idempotent: bool,
    /// Refused with a 4xx: must never appear.
    pub(crate) refused: bool,
    /// Published with a schedule (`ops/schedule.rs`): no subscription delivers it before then.
    pub(crate) sched: Option<Sched>,
}

/// An event's schedule: `deliver_at_ms`, or `delay_ms` stamped as each attempt begins (the
/// API stamps it with its clock as it accepts the request), and the times stamped so far.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sched {
    /// `delay_ms`, or `None` for a `deliver_at_ms` (then `lo == hi`, that time).
    pub(crate) delay: Option<u64>,
    /// The earliest and latest time stamped on an attempt (the one that landed is between).
    pub(crate) lo: i64,
    pub(crate) hi: i64,
}

pub(crate) struct Request {
    pub(crate) events: Vec<u64>,
    pub(crate) idem: Option<String>,
    pub(crate) first_answer: Option<(u64, Vec<Position>)>,
    /// An attempt's answer was lost: it may have landed.
    pub(crate) uncertain: bool,
    /// The highest offsets acknowledged (by topic id and partition) when the latest attempt began.
    pub(crate) floor: BTreeMap<(u64, u32), u64>,
}

/// A commit answered ok, as the checker saw it.
pub(crate) struct CommitSeen {
    pub(crate) value: u64,
    pub(crate) member: String,
    /// The seq at which its answer was seen.
    pub(crate) end: u64,
    /// The group's touch count as it began (a seek or delete since may undo it).
    pub(crate) touch: u64,
    /// The store's durable-write count when its answer was seen: a power cut before the
    /// count grows may undo it, as an ack.
    pub(crate) durable: u64,
}

/// The stored group as a commit began, read directly: its record and the committing
/// member's item (version, value, expiry), with what could change them unseen in between
/// (deletes and seeks, power cuts).
#[derive(Clone, PartialEq)]
pub(crate) struct GroupSnap {
    pub(crate) meta: Option<(u64, Bytes)>,
    pub(crate) member: Option<(u64, Bytes, Option<i64>)>,
    pub(crate) touch: u64,
    pub(crate) power_cuts: u64,
}

#[derive(Default)]
pub(crate) struct GroupModel {
    pub(crate) delivered: BTreeMap<u32, BTreeSet<u64>>,
    pub(crate) excused_below: BTreeMap<u32, u64>,
    pub(crate) max_generation: u64,
    /// Polls of members that keep no positions whose answers were lost: those may skip
    /// events, as documented.
    pub(crate) lossy_polls: u64,
    /// End seqs of group deletes answered ok.
    pub(crate) resets: Vec<u64>,
    /// (start and end seq of a poll answered, its generation).
    pub(crate) max_generation_history: Vec<(u64, u64, u64)>,
    pub(crate) assignments: BTreeMap<(String, u64), Vec<TopicPartition>>,
    pub(crate) left: BTreeMap<String, u64>,
    /// Commits answered ok, by partition.
    pub(crate) commits_ok: BTreeMap<u32, Vec<CommitSeen>>,
    pub(crate) last_seen: BTreeMap<u32, (u64, u64)>,
    pub(crate) touch: u64,
    pub(crate) seeks_in_flight: u32,
    pub(crate) deletes_in_flight: u32,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Delivery {
    pub(crate) nonce: u64,
    pub(crate) count: u32,
    pub(crate) start_seq: u64,
    pub(crate) end_seq: u64,
    /// A lower bound of when its window ends (clock ms).
    pub(crate) until_lo: i64,
    /// When its receive was answered (clock ms).
    pub(crate) end_ms: i64,
    /// The start seq of the first release-like op on it (ack, nack, visibility 0), if any.
    pub(crate) release_seq: Option<u64>,
    /// The start seq of the first ack of it, whatever its answer.
    pub(crate) ack_seq: Option<u64>,
    pub(crate) acked_ok: Option<u64>,
    /// An ack answered ok while this delivery may no longer have held the message (released
    /// by another op first, or its window perhaps over): the store then answers ok for a
    /// message in no lease below the cursor, which is one acked, or a dead letter purged or
    /// deleted since (`Queues::done_already` cannot tell them apart). Acked, or removed.
    pub(crate) ack_blind: bool,
    /// The store's durable-write count when its ack was seen answered ok: a power cut
    /// before the count grows may undo that ack (`MemStore::power_cut`).
    pub(crate) ack_durable: u64,
    pub(crate) ack_maybe: bool,
}

#[derive(Default)]
pub(crate) struct MsgModel {
    pub(crate) deliveries: Vec<Delivery>,
}

pub(crate) struct SubModel {
    pub(crate) name: &'static str,
    pub(crate) record: SubscriptionRecord,
    pub(crate) msgs: BTreeMap<(u32, u64), MsgModel>,
    pub(crate) redrive_seqs: Vec<u64>,
    pub(crate) redrives_in_flight: u32,
    /// End seqs of receives whose answer was lost: each may have delivered (to nobody) any message.
    pub(crate) lost_receives: Vec<u64>,
    /// The dead letters the latest listing answered, and its start seq.
    pub(crate) listed_dead: (u64, BTreeSet<(u32, u64)>),
    /// Dead letters surely removed (deleted, or purged while listed), and when: never delivered again.
    pub(crate) removed_dead: BTreeMap<(u32, u64), u64>,
    /// How many dead letters purges and deletes answered ok removed; whether one's answer was lost.
    pub(crate) removed_count: u64,
    pub(crate) removed_unknown: bool,
}

/// A content filter on SUB_Q, and the model's own answer to whether an event passes it
/// (written out, not by asking `sluice_core::filter`: the filter's semantics have tests of
/// their own; here the queue's use of it is under test, under faults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum SimFilter {
    None,
    /// `{"key": ["k1", "k3"]}`: keyed events of two keys; unkeyed ones never.
    Keys,
    /// Key `k4`, or a value whose pad is at least `PAD` characters long.
    KeyOrLongPad,
}

impl SimFilter {
    const PAD: usize = 100;

    pub(crate) fn draw(rng: &mut Rng) -> Self {
        match rng.weighted(&[50, 25, 25]) {
            0 => SimFilter::None,
            1 => SimFilter::Keys,
            _ => SimFilter::KeyOrLongPad,
        }
    }

    pub(crate) fn pattern(self) -> Option<serde_json::Value> {
        let long_pad = format!("*{}", "x".repeat(Self::PAD));
        match self {
            SimFilter::None => None,
            SimFilter::Keys => Some(serde_json::json!({"key": ["k1", "k3"]})),
            SimFilter::KeyOrLongPad => Some(serde_json::json!({"$or": [
                {"key": [{"prefix": "k4"}]},
                {"value": {"pad": [{"wildcard": long_pad}]}},
            ]})),
        }
    }

    pub(crate) fn passes(self, event: &EventInfo) -> bool {
        let key = event.key.as_deref();
        match self {
            SimFilter::None => true,
            SimFilter::Keys => matches!(key, Some(b"k1" | b"k3")),
            SimFilter::KeyOrLongPad => {
                let pad = serde_json::from_slice::<serde_json::Value>(&event.value)
                    .ok()
                    .and_then(|v| v["pad"].as_str().map(str::len));
                key == Some(b"k4") || pad.is_some_and(|n| n >= Self::PAD)
            }
        }
    }
}

impl GroupModel {
    /// The highest generation any poll answer that returned before `seq` had shown.
    /// The highest generation answered before `seq` since the group was last deleted (a
    /// deleted group starts again at generation 1).
    pub(crate) fn max_generation_at(&self, seq: u64) -> u64 {
        // A poll that overlapped a delete may have answered the deleted group's generation.
        let reset = self.resets.iter().filter(|r| **r < seq).max().copied().unwrap_or(0);
        self.max_generation_history
            .iter()
            .filter(|(start, end, _)| *end < seq && *start > reset)
            .map(|(_, _, g)| *g)
            .max()
            .unwrap_or(0)
    }
}

/// A change of one of SUB_QO's settings (`ops/subops.rs`), over its span of seqs.
#[derive(Debug, Clone)]
pub(crate) struct Change<T> {
    pub(crate) start: u64,
    /// `u64::MAX` while in flight.
    pub(crate) end: u64,
    pub(crate) value: T,
    /// Answered ok: applied.
    pub(crate) ok: bool,
}

impl<T> Change<T> {
    /// The setting the subscription was created with.
    fn created(value: T) -> Self {
        Change { start: 0, end: 0, value, ok: true }
    }

    /// A change begun at `start`.
    pub(crate) fn begun(start: u64, value: T) -> Self {
        Change { start, end: u64::MAX, value, ok: false }
    }
}

/// What the operator did to SUB_QO: its pauses, resumes, changes and seeks, each with its
/// span of seqs, for the promises that depend on them. An op whose answer is unknown may
/// have applied at any point of its span; one that ended had no effect after it.
#[derive(Default)]
pub(crate) struct OpsModel {
    /// Pauses answered ok: (start seq, end seq).
    pub(crate) paused: Vec<(u64, u64)>,
    /// Resumes, whatever their answer: (start seq, end seq).
    pub(crate) resumes: Vec<(u64, u64)>,
    /// Real seeks and purges, whatever their answer: (start seq, end seq).
    pub(crate) seeks: Vec<(u64, u64)>,
    /// Real seeks and purges answered ok: (start seq, end seq).
    pub(crate) sought: Vec<(u64, u64)>,
    /// Changes of the visibility timeout (the first: the one it was created with).
    pub(crate) windows: Vec<Change<u64>>,
    /// Changes of the filter, each with the heads when its answer was seen (from there on,
    /// past where it applies from, `filter_since`).
    pub(crate) filters: Vec<Change<(SimFilter, Vec<u64>)>>,
    /// Every dead letter a listing named: nothing removes SUB_QO's, a seek or purge least of all.
    pub(crate) dead_seen: BTreeSet<(u32, u64)>,
    /// Changes of the rate (`None`: no rate) and of `max_receive_count`.
    pub(crate) rates: Vec<Change<Option<Rate>>>,
    pub(crate) maxes: Vec<Change<u32>>,
    /// Changes of `delay_ms`, over their span of the clock (ms, not seqs: what a delay
    /// applies to is known by its event's timestamp).
    pub(crate) delays: Vec<Change<u64>>,
    /// Receives of SUB_QO answered with messages, for the rate's check (`checker/rate.rs`).
    pub(crate) took: Vec<Took>,
    /// A change whose answer was not ok: the operator makes it again, as a client retries a
    /// 5xx (one that failed between its marks and its record write leaves the marked
    /// partitions taking nothing until it is made).
    pub(crate) retry: Option<SimPatch>,
}

/// A receive of SUB_QO that answered `n` messages, over its span of clock and seqs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Took {
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) start_seq: u64,
    pub(crate) end_seq: u64,
    pub(crate) n: u64,
}

/// What the operator changes of SUB_QO in one PATCH: each field as `SubscriptionPatch`'s.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SimPatch {
    pub(crate) window: Option<u64>,
    pub(crate) filter: Option<SimFilter>,
    /// `Some(None)` removes the rate.
    pub(crate) rate: Option<Option<Rate>>,
    pub(crate) max_receives: Option<u32>,
    pub(crate) delay: Option<u64>,
}

impl SimPatch {
    pub(crate) fn request(&self) -> SubscriptionPatch {
        SubscriptionPatch {
            visibility_timeout_ms: self.window,
            filter: self.filter.map(SimFilter::pattern),
            rate: self.rate,
            max_receive_count: self.max_receives,
            delay_ms: self.delay,
            ..SubscriptionPatch::default()
        }
    }
}

impl OpsModel {
    pub(crate) fn new(window: u64, rate: Option<Rate>, max_receives: u32) -> Self {
        Self {
            windows: vec![Change::created(window)],
            filters: vec![Change::created((SimFilter::None, Vec::new()))],
            rates: vec![Change::created(rate)],
            maxes: vec![Change::created(max_receives)],
            delays: vec![Change { start: 0, end: 0, value: 0, ok: true }],
            ..Self::default()
        }
    }

    /// Notes a change begun at `start` (seq), at `now` (clock).
    pub(crate) fn begin(&mut self, start: u64, now: i64, patch: &SimPatch) {
        if let Some(d) = patch.delay {
            self.delays.push(Change { start: now as u64, end: u64::MAX, value: d, ok: false });
        }
        if let Some(w) = patch.window {
            self.windows.push(Change::begun(start, w));
        }
        if let Some(f) = patch.filter {
            self.filters.push(Change::begun(start, (f, Vec::new())));
        }
        if let Some(r) = patch.rate {
            self.rates.push(Change::begun(start, r));
        }
        if let Some(m) = patch.max_receives {
            self.maxes.push(Change::begun(start, m));
        }
    }

    /// The loosest rate that may have been in force at some point of `[start, end]`: the
    /// largest burst and rate of those; `None` if there may have been none.
    pub(crate) fn rate_ceiling(&self, start: u64, end: u64) -> Option<Rate> {
        in_force(&self.rates, start, end).try_fold(Rate { per_second: 0, burst: 0 }, |top, c| {
            let r = c.value?;
            Some(Rate { per_second: top.per_second.max(r.per_second), burst: top.burst.max(r.burst) })
        })
    }

    /// The shortest `delay_ms` a take at or after clock `ts` may have used.
    pub(crate) fn delay_floor(&self, ts: i64) -> u64 {
        in_force(&self.delays, ts.max(0) as u64, u64::MAX).map(|c| c.value).min().unwrap_or(0)
    }

    /// The largest and the smallest `max_receive_count` that may have been in force over `[start, end]`.
    pub(crate) fn max_receives(&self, start: u64, end: u64) -> (u32, u32) {
        in_force(&self.maxes, start, end).fold((0, u32::MAX), |(hi, lo), c| (hi.max(c.value), lo.min(c.value)))
    }

    /// Whether a receive over seqs `[start, end]` surely found the subscription paused: a
    /// pause answered before it began, and no resume that may have applied since.
    pub(crate) fn surely_paused(&self, start: u64, end: u64) -> bool {
        self.paused.iter().any(|(ps, pe)| *pe < start && !self.resumes.iter().any(|(rs, re)| *rs < end && *re > *ps))
    }

    /// Whether a real seek may have applied between seqs `a` and `b`.
    pub(crate) fn seek_between(&self, a: u64, b: u64) -> bool {
        self.seeks.iter().any(|(s, e)| *s < b && *e > a)
    }

    /// The shortest visibility timeout that may have been in force over `[start, end]`.
    pub(crate) fn window_floor(&self, start: u64, end: u64) -> u64 {
        in_force(&self.windows, start, end).map(|c| c.value).min().unwrap_or(0)
    }

    /// The filter surely in force over `[start, end]`, and the heads past which it applies;
    /// `None` if another may have been.
    pub(crate) fn filter_at(&self, start: u64, end: u64) -> Option<&(SimFilter, Vec<u64>)> {
        let mut all = in_force(&self.filters, start, end);
        match (all.next(), all.next()) {
            (Some(c), None) if c.ok && c.end < start => Some(&c.value),
            _ => None,
        }
    }
}

/// The changes that may have been in force at some point of `[start, end]`: those begun
/// before its end that no change answered ok, begun after they ended, replaced before its start.
fn in_force<T>(changes: &[Change<T>], start: u64, end: u64) -> impl Iterator<Item = &Change<T>> {
    changes
        .iter()
        .filter(move |c| c.start < end && !changes.iter().any(|c2| c2.ok && c2.start > c.end && c2.end < start))
}
