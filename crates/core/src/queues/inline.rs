//! Leases kept inside their partition's cursor item. A receive of a few messages would
//! otherwise write two items (the cursor, a new lease) and its ack delete a third; with
//! the lease inline, the receive writes the cursor item alone and the ack rewrites it:
//! on DynamoDB one conditional write of about 1 KB each (1 WRU) instead of a 2-item
//! transaction (4 WRU) and a delete.
//!
//! Only leases a take creates held by a receiver go inline (their nonces are new, so are
//! their keys), and only while the cursor item stays small ([`MAX_INLINE_LEASES`],
//! [`MAX_INLINE_BYTES`]); the others (large batches, parked, released, redriven, moved by
//! a settle: a moved lease keeps its nonce, so its key may name an item not read, whose
//! create must fail) stay items of their own. Wherever it is kept, a lease is the same
//! record under the same sort key, so reads see one list of leases (`Queues::load`), and
//! the code deciding what to write writes lease items as ever: [`fold`] turns the ops on
//! inline leases into one write of the cursor item.
//!
//! Safety is unchanged: an inline lease's version is its cursor item's, so an op that was
//! conditional on the lease's version becomes the cursor write's condition on the same
//! version, read in the same read; a take that creates a lease inline writes it in the
//! same conditional write that moves the cursor past its messages.

use super::*;
use bytes::Bytes;

/// Leases one cursor item keeps at most.
pub(super) const MAX_INLINE_LEASES: usize = 4;
/// The encoded size of the leases one cursor item keeps at most: with its keys and counts
/// the item stays within DynamoDB's first KB (one write unit).
pub(super) const MAX_INLINE_BYTES: usize = 800;
/// What keeping a lease inline adds besides its record (`{"d":<13 digits>,"r":…}` and
/// a comma).
const INLINE_OVERHEAD: usize = 26;

/// The write of one partition whose state was read as `state`: `ops`, and the cursor item
/// if the write sets the cursor (`cursor`) or changes its inline leases. Every op on an
/// inline lease is folded into that one write of the cursor item, conditional on the
/// version read. `fresh`: the leases a take creates, by due time, as records (only a
/// take's: their nonces are new, so their keys are); those held by a receiver go inline
/// while they fit, the others are created as items of their own after `ops`. The other
/// ops are kept, in order, and the cursor's write comes last. `ops` never write the
/// cursor item themselves: the cursor is encoded once, here, with the leases it keeps.
pub(super) fn fold(
    state: &QueueState,
    sub_id: u64,
    partition: u32,
    cursor: Option<CursorRecord>,
    mut ops: Vec<WriteOp>,
    fresh: Vec<(i64, LeaseRecord)>,
) -> Vec<WriteOp> {
    let inline = || state.leases.iter().filter(|l| l.inline);
    if fresh.is_empty() && !state.inline_changed && inline().next().is_none() {
        if let Some(c) = cursor {
            ops.push(state.cursor_item_write(sub_id, partition, c, &[], &ops));
        }
        return ops;
    }
    let pk = queue_pk(sub_id, partition);
    let mut set: BTreeMap<String, Kept> =
        inline().map(|l| (l.key.sk.clone(), Kept { due: l.due, record: l.record.clone(), encoded: None })).collect();
    let mut bytes: Option<usize> = None;
    let mut changed = state.inline_changed;
    let mut out = Vec::with_capacity(ops.len() + fresh.len() + 1);
    for op in ops {
        let sk = (op.key().pk == pk).then(|| op.key().sk.as_str());
        debug_assert_ne!(sk, Some(CURSOR_SK), "the cursor is written from `cursor`");
        match (&op, sk) {
            (WriteOp::Delete { .. }, Some(sk)) if set.contains_key(sk) => {
                set.remove(sk);
                bytes = None;
                changed = true;
            }
            (WriteOp::Put { value, expect: Expect::Version(_), .. }, Some(sk)) if set.contains_key(sk) => {
                let Ok(record) = layout::decode::<LeaseRecord>("lease", value) else {
                    out.push(op);
                    continue;
                };
                if let Some(lease) = set.get_mut(sk) {
                    (lease.record, lease.encoded) = (record, Some(value.clone()));
                }
                bytes = None;
                changed = true;
            }
            _ => out.push(op),
        }
    }
    for (due, record) in fresh {
        // Encoded once: its size decides, and what does not go inline is written so.
        let (key, value) = (lease_key(sub_id, partition, due, record.nonce), layout::encode(&record));
        let used = *bytes.get_or_insert_with(|| set.values_mut().map(Kept::size).sum());
        let fits = set.len() < MAX_INLINE_LEASES && used + value.len() + INLINE_OVERHEAD <= MAX_INLINE_BYTES;
        if fits && record.held_until.is_some() && !set.contains_key(&key.sk) {
            bytes = Some(used + value.len() + INLINE_OVERHEAD);
            set.insert(key.sk, Kept { due, record, encoded: Some(value) });
            changed = true;
        } else {
            out.push(WriteOp::create(key, value));
        }
    }
    if changed || cursor.is_some() {
        let leases: Vec<(i64, Bytes)> = set.into_values().map(Kept::encoded).collect();
        out.push(state.cursor_item_write(sub_id, partition, cursor.unwrap_or(state.cursor), &leases, &out));
    }
    out
}

/// A lease the cursor item [`fold`] writes keeps, with its record's encoding once made:
/// made once, for its size or as a lease item's value, and copied into the cursor item.
struct Kept {
    due: i64,
    record: LeaseRecord,
    encoded: Option<Bytes>,
}

impl Kept {
    /// Its share of the cursor item.
    fn size(&mut self) -> usize {
        self.encoded.get_or_insert_with(|| layout::encode(&self.record)).len() + INLINE_OVERHEAD
    }

    fn encoded(self) -> (i64, Bytes) {
        (self.due, self.encoded.unwrap_or_else(|| layout::encode(&self.record)))
    }
}

/// Acks `receipts` (all of one partition) on `state` as read, in memory: each message
/// removed from the inline lease holding it, a lease left empty gone. The state's next
/// write carries them, as one write of the cursor item conditional on the version read
/// ([`fold`], `inline_changed`). `false`, and `state` untouched, unless every receipt's
/// message is in an inline lease: the others are settled the ordinary way.
pub(super) fn ack(state: &mut QueueState, receipts: &[(usize, Receipt)]) -> bool {
    let inline: BTreeMap<String, Lease> =
        state.leases.iter().filter(|l| l.inline).map(|l| (l.key.sk.clone(), l.clone())).collect();
    let mut removed: BTreeMap<&str, HashSet<u64>> = BTreeMap::new();
    for (_, r) in receipts {
        let Some((sk, msg)) = holder(&inline, r) else { return false };
        removed.entry(sk).or_default().insert(msg.offset);
    }
    state.leases.retain_mut(|lease| match removed.get(lease.key.sk.as_str()).filter(|_| lease.inline) {
        Some(gone) => {
            lease.record.msgs.retain(|m| !gone.contains(&m.offset));
            !lease.record.msgs.is_empty()
        }
        None => true,
    });
    state.inline_changed = true;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: u64 = 7;

    fn record(nonce: u64, held: bool, offsets: std::ops::Range<u64>) -> LeaseRecord {
        LeaseRecord {
            nonce,
            receives: 1,
            held_until: held.then_some(1_000),
            delivered_ms: 0,
            msgs: offsets.map(|offset| LeaseMsg { offset, first_ms: 1_733_300_000_000, key: None }).collect(),
            redriven: false,
            scheduled: false,
        }
    }

    fn lease(due: i64, record: LeaseRecord, inline: bool) -> Lease {
        let key = lease_key(SUB, 0, due, record.nonce);
        Lease { key, due, version: if inline { 5 } else { 2 }, record, inline }
    }

    fn state(leases: Vec<Lease>) -> QueueState {
        let cursor = CursorRecord { next: 40, ..CursorRecord::default() };
        QueueState {
            cursor,
            cursor_version: Some(5),
            leases,
            inline_changed: false,
            keyed: false,
            written: Vec::new(),
            paused: false,
            marks: Default::default(),
        }
    }

    fn create(due: i64, record: &LeaseRecord) -> WriteOp {
        WriteOp::create(lease_key(SUB, 0, due, record.nonce), layout::encode(record))
    }

    /// The cursor item the ops write (its version condition), and the other ops' sort keys.
    fn written(ops: &[WriteOp]) -> (Option<(CursorItem, Expect)>, Vec<String>) {
        let mut cursor = None;
        let mut others = Vec::new();
        for op in ops {
            match op {
                WriteOp::Put { key, value, expect, .. } if key.sk == CURSOR_SK => {
                    cursor = Some((layout::decode("cursor", value).unwrap(), *expect));
                }
                op => others.push(op.key().sk.clone()),
            }
        }
        (cursor, others)
    }

    #[test]
    fn a_held_lease_created_by_a_take_goes_into_the_cursor_write() {
        let s = state(vec![]);
        let new = record(11, true, 40..50);
        let fresh = vec![(900, new.clone())];
        let (cursor, others) = written(&fold(&s, SUB, 0, Some(CursorRecord { next: 50, ..s.cursor }), vec![], fresh));
        let (item, expect) = cursor.expect("a cursor write");
        assert_eq!(item.next, 50);
        assert_eq!(item.leases, vec![InlineLease { due: 900, record: new }]);
        assert_eq!(expect, Expect::Version(5));
        assert!(others.is_empty(), "no lease item: {others:?}");
    }

    #[test]
    fn parked_large_or_overflowing_leases_stay_items() {
        let s = state((0..MAX_INLINE_LEASES as u64).map(|n| lease(100, record(n, true, n..n + 1), true)).collect());
        let new = record(20, true, 40..41);
        let fresh = vec![(900, new.clone())];
        assert_eq!(fold(&s, SUB, 0, None, vec![], fresh), vec![create(900, &new)], "no room for a fifth lease");

        let s = state(vec![]);
        for new in [record(21, false, 40..41), record(22, true, 40..140)] {
            let fresh = vec![(900, new.clone())];
            assert_eq!(fold(&s, SUB, 0, None, vec![], fresh), vec![create(900, &new)], "parked, or too large");
        }
        let ops = vec![create(900, &record(23, true, 40..41))];
        assert_eq!(fold(&s, SUB, 0, None, ops.clone(), Vec::new()), ops, "only a take inlines new leases");
    }

    #[test]
    fn ops_on_inline_leases_become_one_cursor_write_and_item_leases_stay() {
        let (a, b) = (record(1, true, 0..3), record(2, true, 3..5));
        let item = lease(300, record(3, true, 5..6), false);
        let s = state(vec![lease(100, a.clone(), true), lease(200, b, true), item.clone()]);
        let shrunk = LeaseRecord { msgs: a.msgs[1..].to_vec(), ..a };
        let ops = vec![
            shrink(&s.leases[0], &HashSet::from([0])),
            shrink(&s.leases[1], &HashSet::from([3, 4])),
            shrink(&item, &HashSet::from([5])),
        ];
        let (cursor, others) = written(&fold(&s, SUB, 0, None, ops, Vec::new()));
        let (written, expect) = cursor.expect("a cursor write");
        assert_eq!(written.leases, vec![InlineLease { due: 100, record: shrunk }], "one shrunk, one gone");
        assert_eq!(written.next, 40, "the cursor itself as read");
        assert_eq!(expect, Expect::Version(5));
        assert_eq!(others, vec![item.key.sk], "the item lease's own delete");
    }

    #[test]
    fn without_inline_leases_a_settle_writes_what_it_was_given() {
        let item = lease(300, record(3, true, 5..6), false);
        let s = state(vec![item.clone()]);
        let ops = vec![shrink(&item, &HashSet::from([5]))];
        assert_eq!(fold(&s, SUB, 0, None, ops.clone(), Vec::new()), ops);
    }

    #[test]
    fn keyed_a_cursor_write_names_the_lease_items_its_write_puts() {
        let item = lease(300, record(3, true, 5..6), false);
        let moved = create(900, &record(3, false, 5..6));
        let ops = vec![WriteOp::Delete { key: item.key.clone(), expect: Expect::Version(2) }, moved.clone()];
        for keyed in [false, true] {
            let s = QueueState { keyed, ..state(vec![item.clone()]) };
            let (cursor, others) = written(&fold(&s, SUB, 0, Some(s.cursor), ops.clone(), Vec::new()));
            let named = if keyed { vec![moved.key().sk.clone()] } else { Vec::new() };
            assert_eq!(cursor.expect("a cursor write").0.written, named, "keyed: {keyed}");
            assert_eq!(others.len(), 2, "the delete and the put, kept");
        }
    }

    #[test]
    fn a_cursor_written_keeps_the_inline_leases_it_read() {
        let a = record(1, true, 0..3);
        let s = state(vec![lease(100, a.clone(), true)]);
        let op = s.cursor_write(SUB, 0, CursorRecord { dead: 3, ..s.cursor }, &[]);
        let (cursor, _) = written(&[op]);
        assert_eq!(cursor.expect("a cursor write").0.leases, vec![InlineLease { due: 100, record: a.clone() }]);
        let (cursor, others) =
            written(&fold(&s, SUB, 0, Some(CursorRecord { dead: 3, ..s.cursor }), vec![], Vec::new()));
        let (item, expect) = cursor.expect("a cursor write");
        assert_eq!((item.dead, item.leases), (3, vec![InlineLease { due: 100, record: a }]));
        assert_eq!(expect, Expect::Version(5));
        assert!(others.is_empty());
    }

    #[test]
    fn acks_of_inline_leases_are_carried_by_the_next_cursor_write() {
        let receipt = |offset, due, nonce| {
            let r = Receipt { sub_id: SUB, partition: 0, offset, nonce, due, receives: 1 };
            (offset as usize, r)
        };
        let (a, b) = (record(1, true, 0..3), record(2, true, 3..4));
        let item = lease(300, record(3, true, 5..6), false);
        let read = || state(vec![lease(100, a.clone(), true), lease(200, b.clone(), true), item.clone()]);

        let mut s = read();
        assert!(ack(&mut s, &[receipt(0, 100, 1), receipt(3, 200, 2)]));
        let (cursor, others) = written(&fold(&s, SUB, 0, None, Vec::new(), Vec::new()));
        let (written, expect) = cursor.expect("the acks written alone: a cursor write");
        let left = LeaseRecord { msgs: a.msgs[1..].to_vec(), ..a.clone() };
        assert_eq!(written.leases, vec![InlineLease { due: 100, record: left }], "one shrunk, one gone");
        assert_eq!(expect, Expect::Version(5), "conditional on the cursor as read");
        assert!(others.is_empty());

        for (case, receipts) in [
            ("a lease kept as an item", vec![receipt(0, 100, 1), receipt(5, 300, 3)]),
            ("a message no longer held (stale)", vec![receipt(4, 200, 2)]),
            ("another delivery of the message", vec![(0, Receipt { receives: 2, ..receipt(0, 100, 1).1 })]),
        ] {
            let mut s = read();
            assert!(!ack(&mut s, &receipts), "{case}");
            assert!(!s.inline_changed && s.leases.len() == 3 && s.leases[0].record == a, "{case}: untouched");
        }
    }

    #[test]
    fn a_cursor_item_with_inline_leases_cannot_be_read_as_a_plain_cursor() {
        let cursor = CursorRecord { next: 12, dead: 1, expired: 2, filtered: 0 };
        let plain = CursorItem::new(cursor, Vec::new(), Vec::new()).encode();
        assert_eq!(layout::decode::<CursorRecord>("cursor", &plain).unwrap(), cursor, "no lease: the old shape");
        let with = CursorItem::new(cursor, vec![InlineLease { due: 100, record: record(1, true, 0..3) }], Vec::new());
        let bytes = with.encode();
        assert!(
            layout::decode::<CursorRecord>("cursor", &bytes).is_err(),
            "a binary from before fails, not drops them"
        );
        assert_eq!(layout::decode::<CursorItem>("cursor", &bytes).unwrap(), with);
    }

    #[test]
    fn a_cursor_item_written_before_inline_leases_decodes_with_none() {
        let old = br#"{"next":12,"dead":1,"expired":2}"#;
        let item: CursorItem = layout::decode("cursor", old).unwrap();
        assert_eq!(item.cursor(), CursorRecord { next: 12, dead: 1, expired: 2, filtered: 0 });
        assert!(item.leases.is_empty());
    }
}
