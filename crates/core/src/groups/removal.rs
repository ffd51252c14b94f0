//! Removing a group: the one protocol a delete (`admin`) and the janitor's offsets expiry
//! (`expiry`) share, so that neither can leave a group half there.
//!
//! 1. **The first write** is the removal's one atomic step: the record becomes a tombstone
//!    one version up (offsets recorded below its version are not the group's:
//!    [`GroupRecord::offsets_from`]), the registry entry and the activity go, with as many
//!    offsets as fit (a store's atomic write is bounded: DynamoDB's holds 100 items). A member
//!    joining before it makes it fail whole; one joining after it joins a new group, which
//!    starts every partition at its reset policy, never at an offset waiting to go.
//! 2. **The sweep** reads the offsets again and deletes every one below the tombstone, each
//!    at the version read (one a new incarnation committed over meanwhile stays). Reading
//!    again also finds an offset a commit wrote after the caller's read but before the first
//!    write: a commit checks the record's version, which the first write moved on.
//! 3. **The tombstone goes**, unless a join or seek made the group anew over it.

use super::*;

/// The first write of `group`'s removal, from `state` and `offsets` as read: the record
/// replaced by a tombstone (on its version), `registry` (the caller's op on the registry
/// entry), the activity (on its version) and, unless `keep_entry`, its expiry index entry,
/// then as many offsets (each on its version) as fit. Answers the write and the tombstone's
/// version, from which offsets are a new group's.
pub(super) fn first_write(
    group: &str,
    state: &GroupState,
    registry: WriteOp,
    offsets: &BTreeMap<String, (OffsetRecord, u64)>,
    keep_entry: bool,
) -> (Vec<WriteOp>, u64) {
    let tombstone = GroupRecord { offsets_from: state.version + 1, ..GroupRecord::default() };
    let record_version = Some(state.version).filter(|v| *v > 0);
    let mut ops = vec![
        WriteOp::replace(group_meta_key(group), layout::encode(&tombstone), record_version),
        registry,
        at_version(activity_key(group), state.activity.map(|(_, v)| v)),
    ];
    if let Some((a, _)) = state.activity.filter(|_| !keep_entry) {
        ops.push(WriteOp::Delete { key: expiry_key(a.until, group), expect: Expect::Any });
    }
    let room = MAX_WRITE_OPS - ops.len();
    ops.extend(
        offsets.iter().take(room).map(|(sk, (_, v))| at_version(Key::new(offsets_pk(group), sk.clone()), Some(*v))),
    );
    (ops, tombstone.offsets_from)
}

/// A delete of `key` on `version`, or a check that it is absent (`None`).
pub(super) fn at_version(key: Key, version: Option<u64>) -> WriteOp {
    match version {
        Some(v) => WriteOp::Delete { key, expect: Expect::Version(v) },
        None => WriteOp::Check { key, expect: Expect::Absent },
    }
}

/// The sweep: deletes up to `budget` of `group`'s offsets recorded below the group version
/// `from`, each on the version read. Answers how many went and whether none is left.
pub(super) async fn sweep_below(
    store: &dyn StateStore,
    group: &str,
    from: u64,
    budget: usize,
) -> Result<(usize, bool), StorageError> {
    let old: Vec<WriteOp> = read_offsets(store, group)
        .await?
        .into_iter()
        .filter(|(_, (o, _))| o.group_version < from)
        .map(|(sk, (_, v))| WriteOp::Delete { key: Key::new(offsets_pk(group), sk), expect: Expect::Version(v) })
        .collect();
    let taken = old.len().min(budget);
    for chunk in old[..taken].chunks(MAX_WRITE_OPS) {
        delete_unchanged(store, chunk.to_vec()).await?;
    }
    Ok((taken, taken == old.len()))
}

/// The last step: the tombstone at `from` (with `also`, the caller's other conditional
/// deletes), each left out if it changed since it was read.
pub(super) async fn drop_tombstone(
    store: &dyn StateStore,
    group: &str,
    from: u64,
    also: Vec<WriteOp>,
) -> Result<(), StorageError> {
    let mut ops = vec![WriteOp::Delete { key: group_meta_key(group), expect: Expect::Version(from) }];
    ops.extend(also);
    delete_unchanged(store, ops).await
}

/// Applies conditional deletes, leaving out each one whose item changed since it was read.
async fn delete_unchanged(store: &dyn StateStore, mut ops: Vec<WriteOp>) -> Result<(), StorageError> {
    while !ops.is_empty() {
        match store.write(ops.clone()).await {
            Ok(()) => return Ok(()),
            Err(StorageError::ConditionFailed { op, .. }) if op < ops.len() => {
                ops.remove(op);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(n: usize) -> BTreeMap<String, (OffsetRecord, u64)> {
        (0..n)
            .map(|p| {
                let record = OffsetRecord { topic_id: 1, offset: 2, metadata: None, group_version: 3 };
                (format!("t#{p}"), (record, 7))
            })
            .collect()
    }

    fn state(version: u64, activity: Option<(i64, u64)>) -> GroupState {
        GroupState {
            record: GroupRecord::default(),
            version,
            members: BTreeMap::new(),
            activity: activity.map(|(until, v)| (ActivityRecord { until }, v)),
        }
    }

    #[test]
    fn the_first_write_tombstones_the_record_one_version_up_and_fills_the_rest_with_offsets() {
        let registry = WriteOp::Delete { key: registry_key("g"), expect: Expect::Any };
        let (ops, from) = first_write("g", &state(4, Some((100, 2))), registry, &offsets(150), false);
        assert_eq!(from, 5, "the record's next version");
        assert_eq!(ops.len(), MAX_WRITE_OPS, "offsets fill the write");
        assert!(matches!(&ops[0], WriteOp::Put { key, expect: Expect::Version(4), .. } if *key == group_meta_key("g")));
        assert_eq!(ops[2], WriteOp::Delete { key: activity_key("g"), expect: Expect::Version(2) });
        assert_eq!(ops[3], WriteOp::Delete { key: expiry_key(100, "g"), expect: Expect::Any });
    }

    #[test]
    fn the_expirys_first_write_keeps_the_index_entry_for_the_steps_that_finish_it() {
        let registry = WriteOp::Delete { key: registry_key("g"), expect: Expect::Any };
        let (ops, _) = first_write("g", &state(4, Some((100, 2))), registry, &offsets(1), true);
        assert!(ops.iter().all(|op| !matches!(op, WriteOp::Delete { key, .. } if *key == expiry_key(100, "g"))));
        assert_eq!(ops.len(), 4, "record, registry, activity, one offset");
    }

    #[test]
    fn a_group_without_a_record_or_activity_is_checked_absent() {
        let registry = at_version(registry_key("g"), None);
        let (ops, from) = first_write("g", &state(0, None), registry, &offsets(0), false);
        assert_eq!(from, 1);
        assert!(matches!(&ops[0], WriteOp::Put { expect: Expect::Absent, .. }));
        assert_eq!(ops[2], WriteOp::Check { key: activity_key("g"), expect: Expect::Absent });
    }
}
