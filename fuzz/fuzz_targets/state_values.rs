//! The state-store value decoders (`layout::decode`) for every record the core keeps in
//! the state store. The input is `<kind> <value>`: the kind picks the record type (the
//! names are the core's own words for them), the rest is the stored value.
//!
//! Oracle: no panic; a value that does not decode is `Corrupt` (a fault the core reports,
//! never a panic or another kind of error); one that does encodes again into a value that
//! decodes to the same record (for group records, when it is in the form the core writes:
//! older forms are rewritten once), and a second round trip changes nothing.

#![no_main]

use std::fmt::Debug;

use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_core::groups::{ActivityRecord, GroupRecord, MemberRecord, OffsetRecord, RegistryRecord};
use sluice_core::layout::{
    self, Cursor, FreeRecord, HeadRecord, IdempotencyRecord, ObjectRecord, PurgeRecord, SegmentRecord, TopicRecord,
    UpkeepRecord,
};
use sluice_core::log::timeindex::TimeCursor;
use sluice_core::queues::{CursorRecord, DeadRecord, LeaseRecord, SubPurgeRecord, SubscriptionRecord};
use sluice_core::StorageError;

/// Decodes `value` as the record `kind` names. A record that decodes is encoded again:
/// it must read back as itself if the core could have written it (`as_written`), and in
/// any case read back the same after a second round trip (the encoding settles at once).
fn check<T>(kind: &str, value: &[u8], as_written: impl Fn(&T) -> bool) -> Option<T>
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let record = match layout::decode::<T>(kind, value) {
        Ok(record) => record,
        Err(StorageError::Corrupt(_)) => return None,
        Err(e) => panic!("{kind}: undecodable value is not corrupt but {e:?}"),
    };
    let round_trip = |r: &T| match layout::decode::<T>(kind, &layout::encode(r)) {
        Ok(again) => again,
        Err(e) => panic!("{kind}: {r:?} does not decode once encoded: {e}"),
    };
    let once = round_trip(&record);
    if as_written(&record) {
        assert_eq!(once, record, "{kind}: re-encoded record differs");
    }
    assert_eq!(round_trip(&once), once, "{kind}: a second round trip changes the record");
    Some(record)
}

fn any<T>(_: &T) -> bool {
    true
}

/// A `topic#partition` key as the group records write it: the partition in 10 digits.
fn tp_key(key: &str) -> bool {
    key.rsplit_once('#').is_some_and(|(_, p)| p.len() == 10 && p.parse::<u32>().is_ok_and(|n| format!("{n:010}") == p))
}

/// The group records keep each member's partitions in order, and keys of their
/// per-partition maps in one form: older records (one entry per partition) may not.
fn group_as_written(g: &GroupRecord) -> bool {
    g.members.values().all(|parts| parts.is_sorted()) && g.since.keys().all(|k| tp_key(k))
}

fn member_as_written(m: &MemberRecord) -> bool {
    m.positions.keys().all(|k| tp_key(k))
}

fuzz_target!(|data: &[u8]| {
    let Some(space) = data.iter().position(|&b| b == b' ') else { return };
    let (kind, value) = (&data[..space], &data[space + 1..]);
    let Ok(kind) = std::str::from_utf8(kind) else { return };
    match kind {
        "topic" => {
            check::<TopicRecord>(kind, value, any);
        }
        "purge" => {
            check::<PurgeRecord>(kind, value, any);
        }
        "head" => {
            check::<HeadRecord>(kind, value, any);
        }
        "segment" => {
            if let Some(segment) = check::<SegmentRecord>(kind, value, any) {
                let pieces = segment.pieces();
                assert_eq!(pieces.len(), segment.parts.len() + 1);
                assert_eq!(pieces[0].0, 0, "the first part starts at the segment's base");
            }
        }
        "object" => {
            check::<ObjectRecord>(kind, value, any);
        }
        "free" => {
            check::<FreeRecord>(kind, value, any);
        }
        "upkeep" => {
            check::<UpkeepRecord>(kind, value, any);
        }
        "upkeep-cursor" => {
            check::<Cursor>(kind, value, any);
        }
        "idempotency" => {
            check::<IdempotencyRecord>(kind, value, any);
        }
        "subscription" => {
            check::<SubscriptionRecord>(kind, value, any);
        }
        "queue-cursor" => {
            check::<CursorRecord>(kind, value, any);
        }
        "lease" => {
            check::<LeaseRecord>(kind, value, any);
        }
        "dead-letter" => {
            check::<DeadRecord>(kind, value, any);
        }
        "subscription-purge" => {
            check::<SubPurgeRecord>(kind, value, any);
        }
        "group-registry" => {
            check::<RegistryRecord>(kind, value, any);
        }
        "group" => {
            check::<GroupRecord>(kind, value, group_as_written);
        }
        "member" => {
            check::<MemberRecord>(kind, value, member_as_written);
        }
        "offset" => {
            check::<OffsetRecord>(kind, value, any);
        }
        "group-activity" => {
            check::<ActivityRecord>(kind, value, any);
        }
        "time-cursor" => {
            check::<TimeCursor>(kind, value, any);
        }
        _ => {}
    }
});
