//! One partition's queue as read: its cursor and its leases, those kept inline in the
//! cursor item (`inline.rs`) among those kept as items of their own.

use super::*;

#[derive(Clone)]
pub(super) struct Lease {
    pub(super) key: Key,
    pub(super) due: i64,
    /// An item's version; an inline lease's is its cursor item's.
    pub(super) version: u64,
    pub(super) record: LeaseRecord,
    /// Kept in the cursor item (`inline.rs`): written by writing the cursor.
    pub(super) inline: bool,
}

/// One partition's queue state as read.
pub(super) struct QueueState {
    pub(super) cursor: CursorRecord,
    /// `None` while the cursor item does not exist yet.
    pub(super) cursor_version: Option<u64>,
    /// In sort-key order: due time, then nonce; those kept inline among them.
    pub(super) leases: Vec<Lease>,
    /// The inline leases were changed since read (acks riding on a receive): the next
    /// write on the partition writes the cursor item ([`inline::fold`]).
    pub(super) inline_changed: bool,
}

impl QueueState {
    /// The write of the cursor item as `cursor`, conditional on the version read, keeping
    /// the inline leases as read: a write that changes them goes through [`inline::fold`].
    pub(super) fn cursor_write(&self, sub_id: u64, partition: u32, cursor: CursorRecord) -> WriteOp {
        let leases = self.leases.iter().filter(|l| l.inline).map(Lease::to_inline).collect();
        self.cursor_item_write(sub_id, partition, cursor, leases)
    }

    /// The write of the cursor item as `cursor` holding `leases`, conditional on the
    /// version read.
    pub(super) fn cursor_item_write(
        &self,
        sub_id: u64,
        partition: u32,
        cursor: CursorRecord,
        leases: Vec<InlineLease>,
    ) -> WriteOp {
        let item = CursorItem::new(cursor, leases);
        WriteOp::replace(cursor_key(sub_id, partition), item.encode(), self.cursor_version)
    }
}

impl Lease {
    pub(super) fn to_inline(&self) -> InlineLease {
        InlineLease { due: self.due, record: self.record.clone() }
    }
}

impl Queues {
    /// One partition's queue: the cursor and leases, all of them (`limit: None`) or the
    /// first `limit` items, which are the cursor and the leases due soonest.
    pub(super) async fn load(
        &self,
        sub: &Sub,
        partition: u32,
        limit: Option<usize>,
    ) -> Result<QueueState, StorageError> {
        let mut state = QueueState {
            cursor: CursorRecord { next: sub.start(partition), ..CursorRecord::default() },
            cursor_version: None,
            leases: Vec::new(),
            inline_changed: false,
        };
        let mut query = Query::all(queue_pk(sub.record.id, partition), limit.unwrap_or(PAGE));
        loop {
            let page = self.store().query(&query).await?;
            for item in page.items {
                if item.key.sk == CURSOR_SK {
                    let stored: CursorItem = layout::decode("cursor", &item.value)?;
                    state.cursor = stored.cursor();
                    state.cursor_version = Some(item.version);
                    let pk = &item.key.pk;
                    state.leases.extend(stored.leases.into_iter().map(|l| Lease {
                        key: Key::new(pk.clone(), lease_sk(l.due, l.record.nonce)),
                        due: l.due,
                        version: item.version,
                        record: l.record,
                        inline: true,
                    }));
                } else if item.key.sk == PUSH_STATS_SK {
                    continue;
                } else {
                    let due = parse_lease_sk(&item.key.sk)?;
                    let record = layout::decode("lease", &item.value)?;
                    state.leases.push(Lease { key: item.key, due, version: item.version, record, inline: false });
                }
            }
            match (page.next, limit) {
                (Some(after), None) => query.after = Some(after),
                _ => break,
            }
        }
        // The inline leases (first, from the cursor item) among the others, in sort-key order.
        if state.leases.first().is_some_and(|l| l.inline) {
            state.leases.sort_by(|a, b| a.key.sk.cmp(&b.key.sk));
        }
        Ok(state)
    }
}
