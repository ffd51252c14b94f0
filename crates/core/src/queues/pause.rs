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

/// What a pause or a resume does to one partition's cursor item.
#[derive(Debug, PartialEq, Eq)]
enum Mark {
    /// The subscription was deleted (its delete's fence is there).
    Gone,
    /// Already so: nothing to write.
    Unchanged,
    /// Write this item, conditional on the version read (or on absence).
    Write(CursorItem),
}

/// The cursor item `stored` (`None`: never written, so at the partition's `start`) with
/// its mark set to `paused`.
fn mark(stored: Option<CursorItem>, start: u64, paused: bool) -> Mark {
    match stored {
        Some(item) if item.deleted => Mark::Gone,
        Some(item) if item.paused == paused => Mark::Unchanged,
        Some(item) => Mark::Write(CursorItem { paused, ..item }),
        None if !paused => Mark::Unchanged,
        None => Mark::Write(CursorItem {
            paused,
            ..CursorItem::new(CursorRecord { next: start, ..Default::default() }, Vec::new(), Vec::new())
        }),
    }
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
            for partition in 0..sub.topic.spec.partitions {
                self.mark_cursor(&sub, partition, to == SubscriptionState::Paused).await?;
            }
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

    /// Sets one partition's mark, conditional on the cursor item's version: a take racing
    /// it either lands first (before the pause answers) or fails and reads the mark.
    async fn mark_cursor(&self, sub: &Sub, partition: u32, paused: bool) -> Result<(), Error> {
        let _turn = self.local.turns.wait(sub.record.id, partition).await;
        let key = cursor_key(sub.record.id, partition);
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let stored = self.store().get(&key).await?;
            let item = stored.as_ref().map(|i| layout::decode::<CursorItem>("cursor", &i.value)).transpose()?;
            match mark(item, sub.start(partition), paused) {
                Mark::Gone => return Err(sub.not_found()),
                Mark::Unchanged => return Ok(()),
                Mark::Write(item) => {
                    let op = WriteOp::replace(key.clone(), item.encode(), stored.map(|i| i.version));
                    match self.store().write(vec![op]).await {
                        Ok(()) => return Ok(()),
                        Err(e) => self.lost_race(e, &mut attempt).await?,
                    }
                }
            }
        }
        Err(contended(&sub.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(next: u64, paused: bool) -> CursorItem {
        CursorItem { paused, ..CursorItem::new(CursorRecord { next, dead: 2, ..Default::default() }, vec![], vec![]) }
    }

    #[test]
    fn a_mark_changes_only_the_pause_and_never_revives_a_deleted_subscription() {
        let lease = InlineLease {
            due: 9,
            record: LeaseRecord {
                nonce: 1,
                receives: 1,
                held_until: Some(9),
                delivered_ms: 0,
                msgs: vec![LeaseMsg { offset: 3, first_ms: 0, key: None }],
                redriven: false,
            },
        };
        let with_lease = CursorItem { leases: vec![lease], ..item(4, false) };
        // (stored, start, paused) → the mark.
        let cases = [
            (Some(item(4, false)), 0, true, Mark::Write(item(4, true))),
            (Some(item(4, true)), 0, false, Mark::Write(item(4, false))),
            (Some(item(4, true)), 0, true, Mark::Unchanged),
            (Some(item(4, false)), 0, false, Mark::Unchanged),
            (None, 7, true, Mark::Write(CursorItem { dead: 0, ..item(7, true) })),
            (None, 7, false, Mark::Unchanged),
            (Some(CursorItem::tombstone()), 0, true, Mark::Gone),
            (Some(CursorItem::tombstone()), 0, false, Mark::Gone),
            (Some(with_lease.clone()), 0, true, Mark::Write(CursorItem { paused: true, ..with_lease })),
        ];
        for (stored, start, paused, want) in cases {
            assert_eq!(mark(stored.clone(), start, paused), want, "{stored:?} → paused {paused}");
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
