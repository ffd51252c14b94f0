//! What the queues keep in the state store: the subscription record, the cursor and the
//! lease items of each partition, dead letters, purge orders (their keys are built in
//! [`crate::keys`]).

use super::*;

/// A subscription as stored: its id keys every item of its queue, so a subscription
/// re-created under an old name shares nothing with its predecessor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionRecord {
    pub id: u64,
    pub spec: SubscriptionSpec,
    /// Per partition, the first offset the queue delivers.
    pub starts: Vec<u64>,
    pub created_ms: i64,
    /// A tombstone: the subscription `id` was deleted. It stays until a subscription of the
    /// same name replaces it (or the topic's purge removes it), so the item's version never
    /// restarts: a delete that read an older incarnation's version cannot remove a newer one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// Active or paused (`pause.rs`): what describe shows. The fence receives obey is on
    /// every partition's cursor ([`CursorItem::paused`]), written before this.
    #[serde(default, skip_serializing_if = "SubscriptionState::is_active")]
    pub state: SubscriptionState,
    /// The version of the settings, raised by every change (`patch.rs`): 0 as created. The
    /// fence receives obey is on every partition's cursor ([`CursorItem::config`]), written
    /// before this.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub config: u64,
    /// The settings' version whose change set the filter (0: as created): each partition's
    /// cursor records where that filter applies from ([`CursorItem::filter_since`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub filter_config: u64,
}

/// A partition's cursor: offsets below `next` were all taken from the log into leases.
/// An absent cursor is the subscription's start offset with an empty DLQ.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorRecord {
    pub next: u64,
    /// Messages in this partition's dead-letter queue.
    #[serde(default)]
    pub dead: u64,
    /// Messages removed by retention that receives passed over (new ones below the log
    /// start, and lease messages dropped when they came due), counted in the same write.
    #[serde(default)]
    pub expired: u64,
    /// Messages passed over because they did not match the filter, counted in the same write.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub filtered: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The cursor item as stored: the [`CursorRecord`]'s fields, then the leases kept inline
/// (`inline.rs`): absent in items written before leases were kept there, which decode
/// with none. Written by [`CursorItem::encode`]: with no inline lease (and no lease
/// named as written), as a plain [`CursorRecord`]; with some, `next` is named `n`, so a
/// binary from before inline leases fails to read the item (an error) instead of writing
/// it back without them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorItem {
    #[serde(rename = "n", alias = "next", alias = "N")]
    pub next: u64,
    #[serde(default)]
    pub dead: u64,
    #[serde(default)]
    pub expired: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub filtered: u64,
    #[serde(rename = "l", default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<InlineLease>,
    /// Under key ordering, the sort keys of the lease items put by the write that wrote
    /// this item: a read that sees this item but misses one of them was torn
    /// (`Queues::load`).
    #[serde(rename = "w", default, skip_serializing_if = "Vec::is_empty")]
    pub written: Vec<String>,
    /// The subscription was deleted: the fence its delete puts on every partition
    /// (`subscriptions.rs`), so that a write conditioned on the cursor read before fails,
    /// and a read of it answers that the subscription is gone.
    #[serde(rename = "x", default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// The subscription is paused (`pause.rs`): a take that reads this grants no lease, and
    /// one that read the cursor before the pause wrote it fails its write (it names the
    /// cursor's version). Every write of the item keeps it (`QueueState::paused`).
    #[serde(rename = "p", default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// The settings' version a change announced here before writing the subscription
    /// record (`patch.rs`): a take holding an older record reads it again, and takes
    /// nothing while the record is older still. Every write of the item keeps it
    /// (`QueueState::marks`).
    #[serde(rename = "c", default, skip_serializing_if = "is_zero")]
    pub config: u64,
    /// `[settings' version, offset]`: where each of the last filter changes applies from
    /// on this partition (messages below were judged by the filter before), the newest
    /// last; at most [`FILTER_SINCE_KEPT`].
    #[serde(rename = "fs", default, skip_serializing_if = "Vec::is_empty")]
    pub filter_since: Vec<[u64; 2]>,
    /// Where the queue was last sought (`seek.rs`): below it, a message in no lease was
    /// acked or passed over, so an ack whose lease is gone answers stale there (it cannot
    /// tell which, and passed over is not acked). An older binary that drops it only
    /// answers such an ack `ok`: no message is delivered for it.
    #[serde(rename = "s", default, skip_serializing_if = "is_zero")]
    pub sought: u64,
}

/// Filter changes a cursor item remembers the positions of: the one the subscription
/// record shows and one whose change may be under way.
pub const FILTER_SINCE_KEPT: usize = 2;

impl CursorItem {
    pub fn new(cursor: CursorRecord, leases: Vec<InlineLease>, written: Vec<String>) -> Self {
        let CursorRecord { next, dead, expired, filtered } = cursor;
        Self {
            next,
            dead,
            expired,
            filtered,
            leases,
            written,
            deleted: false,
            paused: false,
            config: 0,
            filter_since: Vec::new(),
            sought: 0,
        }
    }

    /// A deleted subscription's cursor item (a fence: nothing else in it).
    pub fn tombstone() -> Self {
        Self { deleted: true, ..Self::default() }
    }

    pub fn cursor(&self) -> CursorRecord {
        CursorRecord { next: self.next, dead: self.dead, expired: self.expired, filtered: self.filtered }
    }

    pub fn encode(&self) -> bytes::Bytes {
        self.encode_vec(!self.leases.is_empty()).into()
    }

    /// [`Self::encode`] of this item holding `leases` (each a due time and its
    /// [`LeaseRecord`] as [`layout::encode`] wrote it) where [`Self::leases`] is empty: each
    /// record's bytes are copied in, not encoded a second time (the caller encoded them to
    /// size them, or had them as a lease item's value).
    pub fn encode_with(&self, leases: &[(i64, bytes::Bytes)]) -> bytes::Bytes {
        debug_assert!(self.leases.is_empty(), "the leases are those given");
        let mut out = self.encode_vec(!leases.is_empty());
        // A JSON object with at least its `n` (`N`): the leases go before its closing brace.
        if leases.is_empty() || out.pop() != Some(b'}') {
            return out.into();
        }
        out.extend_from_slice(b",\"l\":[");
        for (i, (due, record)) in leases.iter().enumerate() {
            out.extend_from_slice(if i == 0 { b"{\"d\":" } else { b",{\"d\":" });
            // An integer into a Vec: this cannot fail.
            let _ = serde_json::to_writer(&mut out, due);
            out.extend_from_slice(b",\"r\":");
            out.extend_from_slice(record);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out.into()
    }

    /// The item's encoding, `leases` saying whether it holds any (in [`Self::leases`] or
    /// given to [`Self::encode_with`]).
    fn encode_vec(&self, leases: bool) -> Vec<u8> {
        // Serializing these plain records into a Vec cannot fail (as in `layout::encode`).
        if self.deleted || self.paused || self.config > 0 {
            // A fence names `next` `N`: a binary from before the fences reads `n`, would
            // ignore `x`, `p` and `c` and write the item back without them (receiving from
            // a deleted subscription, delivering a paused one's messages, or with settings
            // since changed) during a rolling deploy; with no `n` it fails to read the item
            // instead.
            let mut value = serde_json::to_value(self).unwrap_or_default();
            if let Some(fields) = value.as_object_mut() {
                if let Some(next) = fields.remove("n") {
                    fields.insert("N".into(), next);
                }
            }
            serde_json::to_vec(&value).unwrap_or_default()
        } else if !leases && self.written.is_empty() && self.sought == 0 {
            serde_json::to_vec(&self.cursor()).unwrap_or_default()
        } else {
            serde_json::to_vec(self).unwrap_or_default()
        }
    }
}

/// A lease kept in its partition's cursor item rather than in an item of its own: the
/// same record, with the due time its sort key would have named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlineLease {
    #[serde(rename = "d")]
    pub due: i64,
    #[serde(rename = "r")]
    pub record: LeaseRecord,
}

/// Messages delivered together (or released together), all with one receive count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Names this delivery in receipts; every redelivery or release gets a new one.
    pub nonce: u64,
    /// Deliveries of these messages so far (0: parked behind their key, never delivered).
    pub receives: u32,
    /// The end of the visibility window while held; `None` when released or parked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until: Option<i64>,
    /// When they were last delivered.
    pub delivered_ms: i64,
    pub msgs: Vec<LeaseMsg>,
    /// Put back by a redrive (never delivered since): due, not parked behind a key, so it
    /// does not count toward the keyed look-ahead's parking limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redriven: bool,
    /// Scheduled messages (`crate::schedule`) waiting for their time, due then (never
    /// delivered yet): not parked behind a key, so they neither hold their keys back nor
    /// count toward the parking limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scheduled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseMsg {
    #[serde(rename = "o")]
    pub offset: u64,
    /// First delivery (0 before any).
    #[serde(rename = "f")]
    pub first_ms: i64,
    /// A hash of the event's key, kept under `ordering: key`.
    #[serde(rename = "k", default, skip_serializing_if = "Option::is_none")]
    pub key: Option<u64>,
}

/// A push subscription's deliveries so far (kept beside partition 0's cursor, so the
/// subscription's purge removes it): added to by dispatchers, a few times a second at most.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushStatsRecord {
    pub attempted: u64,
    pub succeeded: u64,
    pub failed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_ms: Option<i64>,
    /// The flow state when the counts were flushed (the last flush's wins: one dispatcher
    /// run drives a subscription at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowRecord>,
}

/// A push subscription's flow state (`crate::push::flow` decides with it), stored with its
/// delivery counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowRecord {
    /// The in-flight limit in use; 0 before any attempt (the ceiling).
    #[serde(default)]
    pub limit: u32,
    /// No batch starts before this (a `Retry-After`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<i64>,
    /// Failed attempts in a row, and when the first of them ended.
    #[serde(default)]
    pub failures: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_since_ms: Option<i64>,
    /// When the last probe of a suspended subscription ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_ms: Option<i64>,
}

/// A dead letter: which delivery history put it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadRecord {
    pub reason: String,
    pub receives: u32,
    pub first_ms: i64,
    pub last_ms: i64,
    pub dead_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<u64>,
}

/// The mark a dead letter leaves when it is deleted or purged: its message was never acked,
/// so an ack of a receipt of its deliveries answers stale, not done (see `settle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedDeadRecord {
    pub removed_ms: i64,
}

/// The items of a deleted subscription still to remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubPurgeRecord {
    pub partitions: u32,
    #[serde(default)]
    pub done_partitions: u32,
}

/// A stable 64-bit hash of an event key (FNV-1a): equal keys, equal hashes. A collision
/// only makes two keys wait for each other.
pub(super) fn key_hash(key: &[u8]) -> u64 {
    crate::hash::fnv1a_64(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cursor item as binaries from before the fences read it (`n` required).
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct BeforeFences {
        n: u64,
    }

    #[test]
    fn a_fenced_cursor_round_trips_and_an_older_binary_cannot_read_it() {
        let cursor = CursorRecord { next: 7, dead: 2, expired: 0, filtered: 0 };
        let paused = CursorItem { paused: true, ..CursorItem::new(cursor, Vec::new(), Vec::new()) };
        let changed =
            CursorItem { config: 3, filter_since: vec![[3, 7]], ..CursorItem::new(cursor, Vec::new(), Vec::new()) };
        for item in [paused, CursorItem::tombstone(), changed] {
            let bytes = item.encode();
            let back: CursorItem = layout::decode("cursor", &bytes).unwrap();
            assert_eq!(back, item);
            assert!(serde_json::from_slice::<BeforeFences>(&bytes).is_err(), "{}", String::from_utf8_lossy(&bytes));
        }
        // An unfenced item keeps the shapes older binaries read.
        let plain = CursorItem::new(cursor, Vec::new(), Vec::new());
        let back: CursorItem = layout::decode("cursor", &plain.encode()).unwrap();
        assert_eq!(back, plain);
    }

    #[test]
    fn a_cursor_item_encoded_with_its_leases_encoded_reads_as_the_item_holding_them() {
        let cursor = CursorRecord { next: 7, dead: 2, expired: 1, filtered: 0 };
        let msg = |offset| LeaseMsg { offset, first_ms: 1_733_300_000_000, key: Some(9) };
        let record = |nonce, msgs| LeaseRecord {
            nonce,
            receives: 1,
            held_until: Some(1_000),
            delivered_ms: 5,
            msgs,
            redriven: false,
            scheduled: false,
        };
        let leases = [
            InlineLease { due: -3, record: record(1, vec![msg(4)]) },
            InlineLease { due: 1_733_300_000_123, record: record(u64::MAX, vec![msg(5), msg(6)]) },
        ];
        let encoded: Vec<_> = leases.iter().map(|l| (l.due, layout::encode(&l.record))).collect();
        let plain = CursorItem::new(cursor, Vec::new(), Vec::new());
        let items = [
            plain.clone(),
            CursorItem { written: vec!["l#1".into()], sought: 3, ..plain.clone() },
            CursorItem { paused: true, config: 2, filter_since: vec![[2, 4]], ..plain.clone() },
        ];
        for item in items {
            for n in 0..=leases.len() {
                let bytes = item.encode_with(&encoded[..n]);
                let holding = CursorItem { leases: leases[..n].to_vec(), ..item.clone() };
                let back: CursorItem = layout::decode("cursor", &bytes).unwrap();
                assert_eq!(back, holding, "{}", String::from_utf8_lossy(&bytes));
                // The shape `encode` gives it: with leases, not readable as a plain cursor.
                let as_plain = layout::decode::<CursorRecord>("cursor", &bytes).is_ok();
                assert_eq!(as_plain, layout::decode::<CursorRecord>("cursor", &holding.encode()).is_ok());
                let unfenced = serde_json::from_slice::<BeforeFences>(&bytes).is_ok();
                assert_eq!(unfenced, serde_json::from_slice::<BeforeFences>(&holding.encode()).is_ok());
            }
        }
    }
}
