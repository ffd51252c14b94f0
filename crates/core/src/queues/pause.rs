//! Pause and resume: a paused subscription keeps its place in the log (its backlog grows,
//! counted as ever) and grants no lease; acks, nacks and visibility changes of messages
//! already out still work.
//!
//! Why no receive that starts after a pause has answered grants a lease, on any process,
//! whatever it caches: the pause marks every partition's cursor item before it answers
//! (`CursorItem::paused`), and every take reads its partition's cursor item and names it,
//! conditional on the version read, in the write that grants leases (`take.rs`,
//! `names_cursor`; a partition without one checks the subscription record, which the
//! pause writes after the cursors). A take that reads the mark takes nothing; one that
//! read the cursor before the mark fails its write, reads again, and finds it. The
//! subscription record's `state` is what describe shows; receives never consult it, so a
//! cached record cannot let one through. Alternatives considered: the record alone (a
//! cached subscription would deliver for up to the cache's lifetime), and a check of the
//! record in every take (every receive of the subscription would name one item: on
//! DynamoDB, transactions naming one item cancel one another).

use serde::{Deserialize, Serialize};

use super::*;

/// Whether a subscription delivers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubscriptionState {
    #[default]
    Active,
    /// Delivers nothing until resumed; receives wait as on an empty queue.
    Paused,
    /// A push subscription whose endpoint kept failing: one probe batch a minute until one
    /// is delivered (`crate::push::flow`). Never stored in the subscription's record (the
    /// dispatcher keeps it with the delivery counts); describe shows it, and a pause wins.
    Suspended,
}

impl SubscriptionState {
    pub fn is_active(&self) -> bool {
        *self == Self::Active
    }
}

/// The write that sets one partition's mark to `paused`, or `None` if it is already so (a
/// partition whose cursor item was never written is active).
fn mark(state: &mut QueueState, sub_id: u64, partition: u32, paused: bool) -> Option<WriteOp> {
    if state.paused == paused || (state.cursor_version.is_none() && !paused) {
        return None;
    }
    state.paused = paused;
    Some(state.cursor_write(sub_id, partition, state.cursor, &[]))
}

impl Queues {
    /// Pauses a subscription (idempotent): once this answers, no receive grants a lease
    /// until it is resumed. Answers the subscription.
    pub async fn pause(&self, topic: &str, name: &str) -> Result<Subscription, Error> {
        self.set_state(topic, name, SubscriptionState::Paused).await
    }

    /// Resumes a subscription (idempotent); this process's waiting receives look again at once.
    pub async fn resume(&self, topic: &str, name: &str) -> Result<Subscription, Error> {
        let sub = self.set_state(topic, name, SubscriptionState::Active).await?;
        self.local.resumed.notify_waiters();
        Ok(sub)
    }

    /// Marks every partition's cursor, then writes the record's state (conditional on the
    /// version read before the marks: a pause and a resume racing each other end in the
    /// state of the one whose record write landed last, its marks redone after the other's).
    async fn set_state(&self, topic: &str, name: &str, to: SubscriptionState) -> Result<Subscription, Error> {
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let sub = self.sub(topic, name).await?;
            let paused = to == SubscriptionState::Paused;
            // The cursor item alone is read (the first item of the partition's collection).
            self.change_cursors(&sub, Some(1), |partition, mut state| {
                let op = mark(&mut state, sub.record.id, partition, paused);
                std::future::ready(Ok(op.map_or(Change::Keep(()), |op| Change::Write(vec![op], ()))))
            })
            .await?;
            if sub.record.state == to {
                return Ok(sub.describe());
            }
            let record = SubscriptionRecord { state: to, ..sub.record.clone() };
            let key = crate::keys::subscription_key(sub.topic.id, name);
            match self.store().write(vec![WriteOp::replace(key, layout::encode(&record), Some(sub.version))]).await {
                Ok(()) => {
                    self.forget_sub(topic, name);
                    tracing::info!(topic, subscription = name, state = ?to, "subscription state changed");
                    return Ok(Sub { record, version: sub.version + 1, ..sub }.describe());
                }
                Err(e) => self.lost_race(e, &mut attempt).await?,
            }
        }
        Err(contended(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(next: u64, paused: bool) -> CursorItem {
        CursorItem { paused, ..CursorItem::new(CursorRecord { next, dead: 2, ..Default::default() }, vec![], vec![]) }
    }

    /// A partition's queue as read: its cursor item (if `version`) with an inline lease.
    fn state(paused: bool, version: Option<u64>) -> QueueState {
        let record = LeaseRecord {
            nonce: 1,
            receives: 1,
            held_until: Some(9),
            delivered_ms: 0,
            msgs: vec![LeaseMsg { offset: 3, first_ms: 0, key: None }],
            redriven: false,
            scheduled: false,
        };
        let key = Key::new(queue_pk(7, 0), lease_sk(9, 1));
        QueueState {
            cursor: CursorRecord { next: 4, dead: 2, ..Default::default() },
            cursor_version: version,
            leases: vec![Lease { key, due: 9, version: version.unwrap_or(0), record, inline: version.is_some() }],
            inline_changed: false,
            keyed: false,
            written: Vec::new(),
            paused,
            marks: Default::default(),
        }
    }

    #[test]
    fn a_mark_changes_only_the_pause() {
        let with_lease = |paused| {
            let read = state(false, Some(3));
            let lease = &read.leases[0];
            let leases = vec![InlineLease { due: lease.due, record: lease.record.clone() }];
            let cursor = CursorRecord { next: 4, dead: 2, ..Default::default() };
            CursorItem { paused, ..CursorItem::new(cursor, leases, vec![]) }
        };
        // (paused, cursor version, to) → the item written, conditional on the version read.
        let cases = [
            (false, Some(3), true, Some(with_lease(true))),
            (true, Some(3), false, Some(with_lease(false))),
            (true, Some(3), true, None),
            (false, Some(3), false, None),
            (false, None, true, Some(item(4, true))),
            (false, None, false, None),
        ];
        // The item as written reads as the one wanted (its fields' order is the encoder's).
        let read = |op: WriteOp| match op {
            WriteOp::Put { key, value, expect, .. } => {
                (key, layout::decode::<CursorItem>("cursor", &value).unwrap(), expect)
            }
            op => panic!("not a put: {op:?}"),
        };
        for (paused, version, to, want) in cases {
            let op = mark(&mut state(paused, version), 7, 0, to);
            let want = want.map(|item| read(WriteOp::replace(cursor_key(7, 0), item.encode(), version)));
            assert_eq!(op.map(read), want, "paused {paused}, version {version:?} → paused {to}");
        }
    }

    #[test]
    fn a_paused_cursor_is_stored_with_its_mark_and_read_back() {
        let bytes = item(4, true).encode();
        assert_eq!(layout::decode::<CursorItem>("cursor", &bytes).unwrap(), item(4, true));
        let active = item(4, false).encode();
        assert_eq!(layout::decode::<CursorItem>("cursor", &active).unwrap(), item(4, false));
    }
}
