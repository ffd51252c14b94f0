//! Turns on queue partitions within one process. Receives, acks, releases and visibility
//! changes of one (subscription, partition) all rewrite its cursor item: raced, all but
//! one lose their conditional write each round, pay a read and a write for nothing, and a
//! loser of many rounds gives up ("changing too fast"). Taking turns, first come first
//! served, they queue instead. Only a saving and fairness: the conditional writes are what
//! keeps them safe, across processes as within one.
//!
//! Beside the turns, what this process's receives last saw of a partition with nothing for
//! its subscription ([`Idle`]), so the next receives skip it without reading it while the
//! log's head has not passed that cursor. A hint for liveness only: a change this process
//! makes under a turn forgets it, and it lapses after [`IDLE_HINT_MS`] whatever happened
//! elsewhere (docs/DESIGN.md, "Receives skip idle partitions").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as TurnLock, OwnedMutexGuard};

use super::Taken;

type Key = (u64, u32);
type Table = Arc<Mutex<HashMap<Key, Arc<TurnLock<()>>>>>;

/// How long a hint that a partition has nothing for a subscription serves. What another
/// process does there without a publish (a nack, a visibility change, a redrive, a seek)
/// reaches this process's receives at most this late, as a long poll's nap already hears
/// of it only when it ends.
pub(super) const IDLE_HINT_MS: i64 = 5_000;

/// (Subscription, partition) hints one process keeps before it starts over.
const MAX_HINTS: usize = 100_000;

/// The partitions of this process's queues someone has (or waits for) a turn on, and the
/// ones its receives found idle.
#[derive(Default)]
pub(super) struct Turns {
    table: Table,
    idle: Mutex<HashMap<Key, Idle>>,
}

/// A partition a receive found with nothing for its subscription: nothing due, its cursor
/// at the log's head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Idle {
    /// The cursor: the partition has something new once its head passes it.
    pub cursor: u64,
    /// When the earliest lease (a redelivery, a delayed message) seen then comes due.
    pub wake_at: Option<i64>,
    /// When the hint lapses.
    pub until: i64,
}

impl Idle {
    /// Whether a receive at `now` may pass over the partition, whose head is `head_next`.
    pub(super) fn holds(&self, head_next: u64, now: i64) -> bool {
        head_next <= self.cursor && now < self.until && self.wake_at.is_none_or(|t| now < t)
    }
}

/// A turn on one queue partition, over when dropped.
pub(super) struct Turn {
    table: Table,
    key: Key,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Turns {
    /// Waits for a turn on (`sub_id`, `partition`): those asking before go first.
    /// Whoever waits for a turn may change the partition (a settle, a pause, a burial),
    /// so its idle hint is forgotten once the turn is held: a take that held the turn
    /// before may have noted one while this waited, from what it read before the change.
    pub(super) async fn wait(&self, sub_id: u64, partition: u32) -> Turn {
        let key = (sub_id, partition);
        let lock = self.lock_of(key);
        // A wait dropped before its turn came (its request was) is cleaned up as a turn is.
        let mut turn = Turn { table: self.table.clone(), key, guard: None };
        turn.guard = Some(lock.lock_owned().await);
        self.forget(key);
        turn
    }

    /// A turn on (`sub_id`, `partition`) if nobody has one (a receive then looks elsewhere).
    pub(super) fn try_now(&self, sub_id: u64, partition: u32) -> Option<Turn> {
        let key = (sub_id, partition);
        let guard = self.lock_of(key).try_lock_owned().ok()?;
        Some(Turn { table: self.table.clone(), key, guard: Some(guard) })
    }

    /// The partition's idle hint, if it still serves a receive at `now` whose head is
    /// `head_next`: then the receive need not read it.
    pub(super) fn idle(&self, sub_id: u64, partition: u32, head_next: u64, now: i64) -> Option<Idle> {
        let hints = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        hints.get(&(sub_id, partition)).copied().filter(|h| h.holds(head_next, now))
    }

    /// Records what a take under `turn` saw: the partition idle (`Some`), or not.
    pub(super) fn note(&self, turn: &Turn, idle: Option<Idle>) {
        let key = turn.key;
        let mut hints = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        match idle {
            Some(hint) => {
                if hints.len() >= MAX_HINTS {
                    hints.clear();
                }
                hints.insert(key, hint);
            }
            None => {
                hints.remove(&key);
            }
        }
    }

    /// The earliest time a lease comes due on a partition of `sub_id` this process's
    /// receives last found idle (a scheduled message, a redelivery), however old the hint.
    pub(super) fn next_due(&self, sub_id: u64) -> Option<i64> {
        let hints = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        hints.iter().filter(|((sub, _), _)| *sub == sub_id).filter_map(|(_, h)| h.wake_at).min()
    }

    fn forget(&self, key: Key) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
    }

    fn lock_of(&self, key: Key) -> Arc<TurnLock<()>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).entry(key).or_default().clone()
    }
}

impl Turn {
    /// The partition this turn is on.
    pub(super) fn partition(&self) -> u32 {
        self.key.1
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        drop(self.guard.take());
        // Clones are made under the table's lock: the table's own is the last one only if
        // nobody holds or waits for a turn on this partition.
        if table.get(&self.key).is_some_and(|lock| Arc::strong_count(lock) == 1) {
            table.remove(&self.key);
        }
    }
}

impl Taken {
    /// The hint this take leaves at `now`: idle if it found nothing to deliver and nothing
    /// held back behind a key or a pause, with when its earliest lease comes due.
    pub(super) fn idle(&self, now: i64) -> Option<Idle> {
        let cursor = self.idle_at.filter(|_| self.messages.is_empty() && !self.blocked)?;
        Some(Idle { cursor, wake_at: self.wake_at, until: now.saturating_add(IDLE_HINT_MS) })
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    #[tokio::test]
    async fn turns_are_taken_in_order_and_forgotten_when_nobody_waits() {
        let turns = Arc::new(Turns::default());
        let first = turns.wait(1, 0).await;
        assert!(turns.try_now(1, 0).is_none(), "taken");
        let other = turns.try_now(1, 1).expect("another partition is free");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (mine, order) = (turns.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let _turn = mine.wait(1, 0).await;
                order.lock().unwrap().push(i);
            }));
            // Each waiter queued before the next one asks.
            while turns.table.lock().unwrap().get(&(1, 0)).map(Arc::strong_count) != Some(i + 3) {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
        drop(other);
        assert!(turns.table.lock().unwrap().is_empty(), "no partition left in the table");

        // A wait given up before its turn came leaves nothing behind either.
        let held = turns.wait(2, 0).await;
        let mut waiting = Box::pin(turns.wait(2, 0));
        let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(waiting.as_mut().poll(cx).is_pending())).await;
        assert!(pending, "the partition is held");
        // The turn passes to the wait, which is then given up without being polled again.
        drop(held);
        drop(waiting);
        assert!(turns.table.lock().unwrap().is_empty(), "no partition left after a wait given up");
    }

    /// A settle waiting for its turn while a take notes the partition idle (from what it
    /// read before the settle's change) finds the hint gone once its turn comes.
    #[tokio::test]
    async fn a_hint_noted_while_a_settle_waited_is_forgotten_when_its_turn_comes() {
        let turns = Arc::new(Turns::default());
        let take = turns.wait(1, 0).await;
        let mut settle = Box::pin(turns.wait(1, 0));
        let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(settle.as_mut().poll(cx).is_pending())).await;
        assert!(pending, "the take holds the turn");
        turns.note(&take, Some(Idle { cursor: 3, wake_at: None, until: 5_000 }));
        assert!(turns.idle(1, 0, 3, 0).is_some(), "noted");
        drop(take);
        let _settle = settle.await;
        assert_eq!(turns.idle(1, 0, 3, 0), None, "the settle may change the partition: the hint is gone");
    }
}
