//! One partition's queue as read: its cursor and its leases, those kept inline in the
//! cursor item (`inline.rs`) among those kept as items of their own, and the lease that
//! holds a receipt's message (what settling and acks riding on a receive both look for).

use super::cache::LookHeads;
use super::*;
use crate::ports::state::{Page, Read};
use bytes::Bytes;

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
    /// The subscription orders by key: a write of the cursor item names the lease items
    /// written with it, and a whole read confirms it saw them ([`Queues::load`]).
    pub(super) keyed: bool,
    /// The lease items the cursor item's writer put, as the cursor item names them.
    pub(super) written: Vec<String>,
    /// The cursor item says the subscription is paused: nothing is taken, and every write
    /// of the item keeps the mark.
    pub(super) paused: bool,
    /// The settings' marks the cursor item carries (`patch.rs`): every write of the item
    /// keeps them.
    pub(super) marks: Marks,
}

/// A cursor item's marks of settings changes ([`CursorItem::config`],
/// [`CursorItem::filter_since`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Marks {
    pub(super) config: u64,
    pub(super) filter_since: Vec<[u64; 2]>,
    /// Where the queue was last sought ([`CursorItem::sought`]).
    pub(super) sought: u64,
}

impl Marks {
    /// Where the filter set by the change of settings' version `config` applies from
    /// (none for the filter the subscription was created with).
    pub(super) fn filter_since_of(&self, config: u64) -> Option<u64> {
        let found = self.filter_since.iter().find(|[c, _]| *c == config && config > 0);
        found.map(|[_, offset]| *offset)
    }
}

impl QueueState {
    /// The write of the cursor item as `cursor`, conditional on the version read, keeping
    /// the inline leases as read (a write that changes them goes through [`inline::fold`]);
    /// `with` are the other ops of its write.
    pub(super) fn cursor_write(&self, sub_id: u64, partition: u32, cursor: CursorRecord, with: &[WriteOp]) -> WriteOp {
        let leases: Vec<(i64, Bytes)> = self.leases.iter().filter(|l| l.inline).map(Lease::encoded).collect();
        self.cursor_item_write(sub_id, partition, cursor, &leases, with)
    }

    /// The write of the cursor item as `cursor` holding `leases` (each a due time and its
    /// record as encoded, [`CursorItem::encode_with`]), conditional on the version read;
    /// keyed, it names the lease items the other ops of its write (`with`) put.
    pub(super) fn cursor_item_write(
        &self,
        sub_id: u64,
        partition: u32,
        cursor: CursorRecord,
        leases: &[(i64, Bytes)],
        with: &[WriteOp],
    ) -> WriteOp {
        let key = cursor_key(sub_id, partition);
        let written = if self.keyed { lease_puts(&key.pk, with) } else { Vec::new() };
        let item = CursorItem {
            paused: self.paused,
            config: self.marks.config,
            filter_since: self.marks.filter_since.clone(),
            sought: self.marks.sought,
            ..CursorItem::new(cursor, Vec::new(), written)
        };
        WriteOp::replace(key, item.encode_with(leases), self.cursor_version)
    }
}

/// The sort keys of the lease items of the partition `pk` that `ops` put.
fn lease_puts(pk: &str, ops: &[WriteOp]) -> Vec<String> {
    let put = |op: &WriteOp| match op {
        WriteOp::Put { key, .. } if key.pk == pk && key.sk.starts_with(LEASE_PREFIX) => Some(key.sk.clone()),
        _ => None,
    };
    ops.iter().filter_map(put).collect()
}

impl Lease {
    /// A lease kept as an item of its own, as stored.
    pub(super) fn from_item(item: crate::ports::state::Item) -> Result<Self, StorageError> {
        let due = parse_lease_sk(&item.key.sk)?;
        let record = layout::decode("lease", &item.value)?;
        Ok(Self { key: item.key, due, version: item.version, record, inline: false })
    }

    /// Its due time and its record encoded, as a cursor item keeps it ([`CursorItem::encode_with`]).
    pub(super) fn encoded(&self) -> (i64, Bytes) {
        (self.due, layout::encode(&self.record))
    }
}

impl Queues {
    /// One partition's queue: the cursor and leases, all of them (`limit: None`; keyed,
    /// with every lease the cursor item names as written confirmed) or the first `limit`
    /// items, which are the cursor and the leases due soonest.
    pub(super) async fn load(&self, sub: &Sub, partition: u32, limit: Option<usize>) -> Result<QueueState, Error> {
        let query = Query::all(queue_pk(sub.record.id, partition), limit.unwrap_or(PAGE));
        let first = self.store().query(&query).await?;
        self.load_from(sub, partition, limit, query, first).await
    }

    /// A take's first read of partition `p` on a pull receive's first look: its head and
    /// its queue state (as [`Self::load`] reads it with `limit`) in one batch of the state
    /// store ([`StateStore::read_many`]: one read transaction on SQLite, where the two calls
    /// paid one each). Nothing is guessed: the keys are the subscription's, as every read of
    /// the take names them, and each answer is as fresh as a read of its own, so a take
    /// decides from them what it decided from the two reads (a head older than the cursor
    /// is read again, `Queues::read_take`).
    pub(super) async fn first_read(
        &self,
        sub: &Sub,
        partition: u32,
        limit: Option<usize>,
    ) -> Result<(HeadRecord, QueueState), Error> {
        let query = Query::all(queue_pk(sub.record.id, partition), limit.unwrap_or(PAGE));
        let reads = [Read::Get(keys::head_key(sub.topic.id, partition)), Read::Query(query.clone())];
        let mut found = self.store().read_many(&reads).await?.into_iter();
        let short = || StorageError::Invalid("a batched read answered fewer reads than asked".into());
        let head = match found.next().ok_or_else(short)?.into_item()? {
            Some(item) => layout::decode("head", &item.value)?,
            None => HeadRecord::default(),
        };
        let first = found.next().ok_or_else(short)?.into_page()?;
        Ok((head, self.load_from(sub, partition, limit, query, first).await?))
    }

    /// What a take on partition `p` starts from: its head as this look read it (every head,
    /// read now, if it has not), or on a first look its head and queue state, read together
    /// ([`Self::first_read`]), the state for the take's first attempt.
    pub(super) async fn take_start(
        &self,
        heads: &mut LookHeads,
        sub: &Sub,
        p: u32,
        want: usize,
    ) -> Result<Start, Error> {
        if !matches!(heads, LookHeads::First) {
            return Ok(Start { head: self.head_in(heads, &sub.topic, p).await?, state: None });
        }
        let (head, state) = self.first_read(sub, p, load_limit(sub, want)).await?;
        *heads = LookHeads::One(p, head);
        Ok(Start { head, state: Some(state) })
    }

    /// [`Self::load`] from the first page of `query`, its own first query's answer.
    async fn load_from(
        &self,
        sub: &Sub,
        partition: u32,
        limit: Option<usize>,
        mut query: Query,
        first: Page,
    ) -> Result<QueueState, Error> {
        let mut state = QueueState {
            cursor: CursorRecord { next: sub.start(partition), ..CursorRecord::default() },
            cursor_version: None,
            leases: Vec::new(),
            inline_changed: false,
            keyed: sub.record.spec.ordering == Ordering::Key,
            written: Vec::new(),
            paused: false,
            marks: Marks::default(),
        };
        let mut page = first;
        loop {
            for item in page.items {
                if item.key.sk == CURSOR_SK {
                    let stored: CursorItem = layout::decode("cursor", &item.value)?;
                    if stored.deleted {
                        return Err(sub.not_found());
                    }
                    state.cursor = stored.cursor();
                    state.cursor_version = Some(item.version);
                    state.written = stored.written;
                    state.paused = stored.paused;
                    state.marks =
                        Marks { config: stored.config, filter_since: stored.filter_since, sought: stored.sought };
                    let pk = &item.key.pk;
                    state.leases.extend(stored.leases.into_iter().map(|l| Lease {
                        key: Key::new(pk.clone(), lease_sk(l.due, l.record.nonce)),
                        due: l.due,
                        version: item.version,
                        record: l.record,
                        inline: true,
                    }));
                } else if item.key.sk == PUSH_STATS_SK || item.key.sk == RATE_SK {
                    continue;
                } else {
                    state.leases.push(Lease::from_item(item)?);
                }
            }
            match (page.next, limit) {
                (Some(after), None) => query.after = Some(after),
                _ => break,
            }
            page = self.store().query(&query).await?;
        }
        let whole = state.keyed && limit.is_none();
        let confirmed = if whole { self.confirm_written(&query.pk, &mut state).await? } else { 0 };
        // The inline leases (first, from the cursor item) and those confirmed (last) among
        // the others, in sort-key order.
        if confirmed > 0 || state.leases.first().is_some_and(|l| l.inline) {
            state.leases.sort_by(|a, b| a.key.sk.cmp(&b.key.sk));
        }
        Ok(state)
    }

    /// Keyed, the lease items the cursor item's writer put that a whole read of the
    /// partition missed. A DynamoDB query is not a snapshot against a transaction: it can
    /// see the cursor a settle rewrote but not yet the lease it moved, and a receive
    /// deciding on that read would deliver the next message of the lease's key. Each one
    /// missed is read on its own (a single-item read sees a transaction whole): found, the
    /// read was torn, and the lease joins the state; gone, an ack (which leaves the cursor
    /// alone) removed it since. Answers how many joined.
    async fn confirm_written(&self, pk: &str, state: &mut QueueState) -> Result<usize, StorageError> {
        let missed: Vec<String> =
            state.written.iter().filter(|sk| !state.leases.iter().any(|l| &l.key.sk == *sk)).cloned().collect();
        let mut joined = 0;
        for sk in missed {
            if let Some(item) = self.store().get(&Key::new(pk, sk)).await? {
                state.leases.push(Lease::from_item(item)?);
                joined += 1;
            }
        }
        Ok(joined)
    }
}

/// How much of a partition's queue a take of up to `want` messages reads: unordered, the
/// cursor and the leases due soonest are enough (one past `want` tells when the next one is
/// due); keyed, every lease's keys matter.
pub(super) fn load_limit(sub: &Sub, want: usize) -> Option<usize> {
    (sub.record.spec.ordering != Ordering::Key).then_some(want + 2)
}

/// What a take starts from ([`Queues::take_start`]): the partition's head, and its queue
/// state if a first look read it with the head.
pub(super) struct Start {
    pub(super) head: HeadRecord,
    pub(super) state: Option<QueueState>,
}

/// The lease holding a receipt's message under the receipt's delivery (same nonce and
/// receive count), by sort key, with the message.
pub(super) fn holder<'a>(leases: &'a BTreeMap<String, Lease>, r: &Receipt) -> Option<(&'a str, LeaseMsg)> {
    let holds = |l: &'a Lease| {
        let same_delivery = l.record.nonce == r.nonce && l.record.receives == r.receives;
        let msg = l.record.msgs.iter().find(|m| same_delivery && m.offset == r.offset);
        msg.map(|m| (l.key.sk.as_str(), *m))
    };
    // The lease the receipt names first (its due time, without formatting its sort key):
    // it is where the message is unless it moved.
    leases.values().filter(|l| l.due == r.due).chain(leases.values()).find_map(holds)
}

/// Subscription `s` (id 7, default settings) of topic `t` (id 1, one partition), its item at
/// `version`: for the plans' unit tests.
#[cfg(test)]
pub(super) fn test_sub(version: u64) -> Sub {
    let spec = crate::model::TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None };
    let topic = TopicConfig { name: "t".into(), id: 1, spec, created_ms: 0, version: 1 };
    let record = SubscriptionRecord {
        id: 7,
        spec: SubscriptionSpec::default(),
        starts: vec![0],
        created_ms: 0,
        deleted: false,
        state: SubscriptionState::Active,
        config: 0,
        filter_config: 0,
    };
    Sub { topic, name: "s".into(), record, version, guarded: false }
}
