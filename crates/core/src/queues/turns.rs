//! Turns on queue partitions within one process. Receives, acks, releases and visibility
//! changes of one (subscription, partition) all rewrite its cursor item: raced, all but
//! one lose their conditional write each round, pay a read and a write for nothing, and a
//! loser of many rounds gives up ("changing too fast"). Taking turns, first come first
//! served, they queue instead. Only a saving and fairness: the conditional writes are what
//! keeps them safe, across processes as within one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as TurnLock, OwnedMutexGuard};

type Key = (u64, u32);
type Table = Arc<Mutex<HashMap<Key, Arc<TurnLock<()>>>>>;

/// The partitions of this process's queues someone has (or waits for) a turn on.
#[derive(Default)]
pub(super) struct Turns {
    table: Table,
}

/// A turn on one queue partition, over when dropped.
pub(super) struct Turn {
    table: Table,
    key: Key,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Turns {
    /// Waits for a turn on (`sub_id`, `partition`): those asking before go first.
    pub(super) async fn wait(&self, sub_id: u64, partition: u32) -> Turn {
        let key = (sub_id, partition);
        let lock = self.lock_of(key);
        // A wait dropped before its turn came (its request was) is cleaned up as a turn is.
        let mut turn = Turn { table: self.table.clone(), key, guard: None };
        turn.guard = Some(lock.lock_owned().await);
        turn
    }

    /// A turn on (`sub_id`, `partition`) if nobody has one (a receive then looks elsewhere).
    pub(super) fn try_now(&self, sub_id: u64, partition: u32) -> Option<Turn> {
        let key = (sub_id, partition);
        let guard = self.lock_of(key).try_lock_owned().ok()?;
        Some(Turn { table: self.table.clone(), key, guard: Some(guard) })
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
}
