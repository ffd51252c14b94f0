//! The janitor's expiry of the offsets of groups without members.

use super::*;

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
    let query = Query {
        pk: EXPIRY_PK.to_owned(),
        from: None,
        // Every entry of a time up to the threshold ('$' sorts right after '#').
        to: Some(format!("{threshold:020}$")),
        forward: true,
        limit: EXPIRY_ENTRIES_PER_STEP,
        after: None,
    };
    let mut left = budget.max(1);
    let mut deleted = 0;
    for entry in store.query(&query).await?.items {
        if left == 0 {
            break;
        }
        let parsed = entry.key.sk.split_once('#').and_then(|(t, g)| Some((t.parse::<i64>().ok()?, g.to_owned())));
        let Some((until, group)) = parsed else {
            return Err(StorageError::Corrupt(format!("offsets expiry entry {:?}", entry.key.sk)));
        };
        let state = read_state(store, &group).await?;
        let Some((_, version)) = state.activity.filter(|(a, _)| expiry_key(a.until, &group) == entry.key) else {
            // Left over by a deleted group: its activity is gone or has an entry of its own.
            match store.write(vec![WriteOp::Delete { key: entry.key, expect: Expect::Version(entry.version) }]).await {
                Ok(()) => {
                    deleted += 1;
                    left -= 1;
                }
                Err(StorageError::ConditionFailed { .. }) => {}
                Err(e) => return Err(e),
            }
            continue;
        };
        if let Some(latest) = state.members.values().map(|(_, _, expires)| *expires).max() {
            // A live member the activity does not cover (never written so): cover it.
            let ops = activity_ops(&group, state.activity.as_ref(), latest.max(until));
            match store.write(ops).await {
                Ok(()) | Err(StorageError::ConditionFailed { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        // The offsets, a write's worth at a time, each write checking that nobody used the group.
        let mut finished = true;
        loop {
            if left == 0 {
                finished = false;
                break;
            }
            let page = store.query(&Query::all(offsets_pk(&group), left.min(MAX_WRITE_OPS - 1))).await?;
            if page.items.is_empty() {
                break;
            }
            let n = page.items.len();
            let mut ops = vec![WriteOp::Check { key: activity_key(&group), expect: Expect::Version(version) }];
            ops.extend(page.items.into_iter().map(|i| WriteOp::Delete { key: i.key, expect: Expect::Any }));
            match store.write(ops).await {
                Ok(()) => {
                    deleted += n;
                    left = left.saturating_sub(n);
                }
                // Used meanwhile: the next step finds its entry moved (or deletes what is left).
                Err(StorageError::ConditionFailed { .. }) => {
                    finished = false;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if !finished {
            continue;
        }
        let mut ops = vec![
            WriteOp::Delete { key: activity_key(&group), expect: Expect::Version(version) },
            WriteOp::Delete { key: entry.key, expect: Expect::Any },
            WriteOp::Delete { key: registry_key(&group), expect: Expect::Any },
        ];
        if state.version > 0 {
            ops.push(WriteOp::Delete { key: meta_key(&group), expect: Expect::Version(state.version) });
        }
        let n = ops.len();
        match store.write(ops).await {
            Ok(()) => {
                deleted += n;
                left = left.saturating_sub(n);
                tracing::info!(group = %group, "group offsets expired");
            }
            Err(StorageError::ConditionFailed { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}
