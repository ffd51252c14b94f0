//! The janitor's expiry of the offsets of groups without members.

use super::*;
use crate::keys::{expiry_entry_of, expiry_pk, expiry_sk_upto};
use crate::ports::state::Item;

/// The janitor's step of offsets expiry: removes the offsets, record, registry entry and
/// activity of groups without members whose activity ended `retention_ms` before
/// `now_ms`, deleting at most about `budget` items; answers how many it deleted.
///
/// One query when nothing is expired (the index is in time order). An expired group goes
/// as a deleted one does (see `removal`), its first write checking the activity item's
/// version, which any join (and seek) of an expired group changes: a member joining before
/// it keeps the group; one joining after it starts at its reset policy, never at an offset
/// waiting to go. Resumable: the group's index entry goes last, with the tombstone, so a
/// step cut short leaves it for the next one to finish.
pub(crate) async fn expire_step(
    store: &dyn StateStore,
    now_ms: i64,
    retention_ms: i64,
    budget: usize,
) -> Result<usize, StorageError> {
    let threshold = now_ms.saturating_sub(retention_ms.max(0));
    if threshold < 0 {
        return Ok(0);
    }
    let mut left = budget.max(1);
    let mut deleted = 0;
    for entry in store.query(&expiry_query(threshold)).await?.items {
        if left == 0 {
            break;
        }
        let (until, group) = expiry_entry_of(&entry.key)?;
        let state = read_state(store, &group).await?;
        let n = match judge(&state, &entry, &group, until) {
            Verdict::Stray(ops) => apply(store, ops).await?,
            Verdict::Cover(ops) => apply(store, ops).await.map(|_| 0)?,
            Verdict::Expire => expire(store, &group, &state, &entry, left).await?,
            Verdict::Finish { from } => finish(store, &group, from, &entry, left).await?,
        };
        deleted += n;
        left = left.saturating_sub(n);
    }
    Ok(deleted)
}

/// Applies `ops`, answering how many they were (0 if a condition failed: the next step
/// judges the group again).
async fn apply(store: &dyn StateStore, ops: Vec<WriteOp>) -> Result<usize, StorageError> {
    let n = ops.len();
    match store.write(ops).await {
        Ok(()) => Ok(n),
        Err(StorageError::ConditionFailed { .. }) => Ok(0),
        Err(e) => Err(e),
    }
}

/// The removal's first write, on the activity's version, then as much of the rest as
/// `left` allows. Answers how many items went.
async fn expire(
    store: &dyn StateStore,
    group: &str,
    state: &GroupState,
    entry: &Item,
    left: usize,
) -> Result<usize, StorageError> {
    let offsets = read_offsets(store, group).await?;
    let registry = WriteOp::Delete { key: registry_key(group), expect: Expect::Any };
    let (ops, from) = removal::first_write(group, state, registry, &offsets, true);
    // The tombstone is a put, not a deletion.
    let n = apply(store, ops).await?.saturating_sub(1);
    if n == 0 {
        return Ok(0);
    }
    Ok(n + finish(store, group, from, entry, left.saturating_sub(n)).await?)
}

/// The removal's sweep (within `left` items) and, once no offset is left, its tombstone at
/// `from` with the group's index `entry`. Answers how many items went.
async fn finish(
    store: &dyn StateStore,
    group: &str,
    from: u64,
    entry: &Item,
    left: usize,
) -> Result<usize, StorageError> {
    let (n, swept) = removal::sweep_below(store, group, from, left).await?;
    if !swept {
        return Ok(n);
    }
    let entry = WriteOp::Delete { key: entry.key.clone(), expect: Expect::Version(entry.version) };
    removal::drop_tombstone(store, group, from, vec![entry]).await?;
    tracing::info!(group = %group, "group offsets expired");
    Ok(n + 2)
}

/// The entries of the expiry index whose time is at most `threshold`, oldest first.
fn expiry_query(threshold: i64) -> Query {
    Query {
        pk: expiry_pk().to_owned(),
        from: None,
        to: Some(expiry_sk_upto(threshold)),
        forward: true,
        limit: EXPIRY_ENTRIES_PER_STEP,
        after: None,
    }
}

/// What to do with a group whose expiry entry came due.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Left over by a deleted group (its activity is gone, or has an entry of its own):
    /// the entry goes, on its version.
    Stray(Vec<WriteOp>),
    /// A live member the activity does not cover (never written so): cover it.
    Cover(Vec<WriteOp>),
    /// Expired: its removal starts, its first write checking the activity's version.
    Expire,
    /// Its removal started (the record is a tombstone at `from`, the activity gone): the
    /// sweep and the tombstone's delete are left to finish.
    Finish { from: u64 },
}

fn judge(state: &GroupState, entry: &Item, group: &str, until: i64) -> Verdict {
    if state.activity.is_none() && state.version > 0 && state.version == state.record.offsets_from {
        return Verdict::Finish { from: state.version };
    }
    if state.activity.is_none_or(|(a, _)| expiry_key(a.until, group) != entry.key) {
        return Verdict::Stray(vec![WriteOp::Delete {
            key: entry.key.clone(),
            expect: Expect::Version(entry.version),
        }]);
    }
    match state.members.values().map(|(_, _, expires)| *expires).max() {
        Some(latest) => Verdict::Cover(activity_ops(group, state.activity.as_ref(), latest.max(until))),
        None => Verdict::Expire,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(activity_until: Option<i64>, member_expires: Option<i64>) -> GroupState {
        let members = member_expires.map(|e| ("m".to_owned(), (MemberRecord::default(), 1, e))).into_iter().collect();
        let activity = activity_until.map(|until| (ActivityRecord { until }, 3));
        GroupState { record: GroupRecord::default(), version: 2, members, activity }
    }

    fn entry(until: i64) -> Item {
        Item { key: expiry_key(until, "g"), value: bytes::Bytes::new(), version: 5, expires_at_ms: None }
    }

    #[test]
    fn judge_tells_strays_live_members_and_expired_groups_apart() {
        // The entry names the group's activity, nobody is live: expired.
        assert_eq!(judge(&state(Some(100), None), &entry(100), "g", 100), Verdict::Expire);
        // The activity moved on (a join): this entry is a leftover.
        assert!(matches!(judge(&state(Some(900), None), &entry(100), "g", 100), Verdict::Stray(_)));
        // No activity at all (a deleted group): a leftover.
        assert!(matches!(judge(&state(None, None), &entry(100), "g", 100), Verdict::Stray(_)));
        // No activity, and the record a tombstone at its own version: a removal to finish.
        let mut started = state(None, None);
        started.record.offsets_from = 2;
        assert_eq!(judge(&started, &entry(100), "g", 100), Verdict::Finish { from: 2 });
        // A live member: the activity is moved to cover it, nothing is deleted.
        match judge(&state(Some(100), Some(700)), &entry(100), "g", 100) {
            Verdict::Cover(ops) => {
                assert!(ops.iter().all(|op| !matches!(op, WriteOp::Delete { key, .. } if key == &group_meta_key("g"))))
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn entries_parse_and_a_bad_one_is_corrupt() {
        assert_eq!(expiry_entry_of(&expiry_key(42, "g#x")).unwrap(), (42, "g#x".to_owned()));
        assert!(expiry_entry_of(&Key::new(expiry_pk(), "nope")).is_err());
    }
}
