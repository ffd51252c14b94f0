//! The janitor's expiry of the offsets of groups without members.

use super::*;
use crate::keys::{expiry_entry_of, expiry_pk, expiry_sk_upto};
use crate::ports::state::Item;

/// The janitor's step of offsets expiry: removes the offsets, record, registry entry and
/// activity of groups without members whose activity ended `retention_ms` before
/// `now_ms`, deleting at most about `budget` items; answers how many it deleted.
///
/// One query when nothing is expired (the index is in time order). Resumable: a group's
/// index entry goes last, so a step cut short leaves it for the next one. Safe against
/// a member joining meanwhile: every deletion checks the activity item's version, which
/// any join (and seek) of an expired group changes.
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
        // The write, whether its deletes count against the budget, whether it ends the group.
        let (ops, counted, last) = match judge(&state, &entry, &group, until) {
            Verdict::Stray(ops) => (ops, true, false),
            Verdict::Cover(ops) => (ops, false, false),
            Verdict::Expire { version } => {
                // The offsets, a write's worth at a time, each write checking that nobody used the group.
                let (n, finished) = drain_offsets(store, &group, version, left).await?;
                deleted += n;
                left = left.saturating_sub(n);
                if !finished {
                    continue;
                }
                (removal(&state, &group, &entry.key, version), true, true)
            }
        };
        let n = if counted { ops.len() } else { 0 };
        match store.write(ops).await {
            Ok(()) => {
                deleted += n;
                left = left.saturating_sub(n);
                if last {
                    tracing::info!(group = %group, "group offsets expired");
                }
            }
            Err(StorageError::ConditionFailed { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
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
    /// Expired: its offsets, then the rest, each write checking the activity's version.
    Expire { version: u64 },
}

fn judge(state: &GroupState, entry: &Item, group: &str, until: i64) -> Verdict {
    let Some((_, version)) = state.activity.filter(|(a, _)| expiry_key(a.until, group) == entry.key) else {
        return Verdict::Stray(vec![WriteOp::Delete {
            key: entry.key.clone(),
            expect: Expect::Version(entry.version),
        }]);
    };
    match state.members.values().map(|(_, _, expires)| *expires).max() {
        Some(latest) => Verdict::Cover(activity_ops(group, state.activity.as_ref(), latest.max(until))),
        None => Verdict::Expire { version },
    }
}

/// Deletes the group's committed offsets, a write's worth at a time, each write checking
/// the activity's `version` (a join or seek changes it), within `left` items. Answers how
/// many went and whether all did (`false`: out of budget, or the group was used meanwhile
/// and the next step finds its entry moved, or deletes what is left).
async fn drain_offsets(
    store: &dyn StateStore,
    group: &str,
    version: u64,
    mut left: usize,
) -> Result<(usize, bool), StorageError> {
    let mut deleted = 0;
    loop {
        if left == 0 {
            return Ok((deleted, false));
        }
        let page = store.query(&Query::all(offsets_pk(group), left.min(MAX_WRITE_OPS - 1))).await?;
        if page.items.is_empty() {
            return Ok((deleted, true));
        }
        let n = page.items.len();
        let mut ops = vec![WriteOp::Check { key: activity_key(group), expect: Expect::Version(version) }];
        ops.extend(page.items.into_iter().map(|i| WriteOp::Delete { key: i.key, expect: Expect::Any }));
        match store.write(ops).await {
            Ok(()) => {
                deleted += n;
                left = left.saturating_sub(n);
            }
            Err(StorageError::ConditionFailed { .. }) => return Ok((deleted, false)),
            Err(e) => return Err(e),
        }
    }
}

/// The last write of an expired group: its activity (on `version`), index entry, registry
/// entry and record (on its version).
fn removal(state: &GroupState, group: &str, entry: &Key, version: u64) -> Vec<WriteOp> {
    let mut ops = vec![
        WriteOp::Delete { key: activity_key(group), expect: Expect::Version(version) },
        WriteOp::Delete { key: entry.clone(), expect: Expect::Any },
        WriteOp::Delete { key: registry_key(group), expect: Expect::Any },
    ];
    if state.version > 0 {
        ops.push(WriteOp::Delete { key: group_meta_key(group), expect: Expect::Version(state.version) });
    }
    ops
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
        assert_eq!(judge(&state(Some(100), None), &entry(100), "g", 100), Verdict::Expire { version: 3 });
        // The activity moved on (a join): this entry is a leftover.
        assert!(matches!(judge(&state(Some(900), None), &entry(100), "g", 100), Verdict::Stray(_)));
        // No activity at all (a deleted group): a leftover.
        assert!(matches!(judge(&state(None, None), &entry(100), "g", 100), Verdict::Stray(_)));
        // A live member: the activity is moved to cover it, nothing is deleted.
        match judge(&state(Some(100), Some(700)), &entry(100), "g", 100) {
            Verdict::Cover(ops) => {
                assert!(ops.iter().all(|op| !matches!(op, WriteOp::Delete { key, .. } if key == &group_meta_key("g"))))
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn the_last_write_checks_the_activity_and_the_records_version() {
        let ops = removal(&state(Some(100), None), "g", &expiry_key(100, "g"), 3);
        assert_eq!(ops[0], WriteOp::Delete { key: activity_key("g"), expect: Expect::Version(3) });
        assert_eq!(ops.last(), Some(&WriteOp::Delete { key: group_meta_key("g"), expect: Expect::Version(2) }));
    }

    #[test]
    fn entries_parse_and_a_bad_one_is_corrupt() {
        assert_eq!(expiry_entry_of(&expiry_key(42, "g#x")).unwrap(), (42, "g#x".to_owned()));
        assert!(expiry_entry_of(&Key::new(expiry_pk(), "nope")).is_err());
    }
}
