//! A state store that behaves at the port as DynamoDB does behind the AWS adapter: each
//! write sent as the adapter sends it (one `UpdateItem`/`DeleteItem`, or one
//! `TransactWriteItems`), billed by DynamoDB's sizing rules, with DeBrie's latencies and
//! DynamoDB's rules:
//! - a transaction naming an item that another transaction in flight names is cancelled
//!   (`TransactionConflict`), a `ConditionCheck` counting as a touch (the conservative
//!   reading, ⚠ not confirmed by a primary source); a single-item write to such an item is
//!   refused (`TransactionConflictException`). The adapter maps both to
//!   [`StorageError::Throttled`] and does not resend them: the core retries.
//! - each item key takes at most 1,000 write and 3,000 read units a second; beyond, a
//!   request is throttled, and the adapter resends it (6 attempts, backoff 25 ms..2 s).
//! - 400 KB items, 100 items and 4 MB per transaction, 1 MB Query pages.
//!
//! The items themselves live in a [`MemStore`], which applies every write atomically at the
//! end of its latency (a transaction's items are held by it meanwhile, so no other write
//! can change what its conditions read).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sluice_core::ports::state::{validate, Expect, Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{keys, StorageError};
use sluice_testkit::MemStore;

use super::cloud::{Buckets, Cloud};
use super::params::{self, Dist};

const WRITE_UNIT: usize = 1024;
const READ_UNIT: usize = 4096;

/// DynamoDB's view of what the adapter stores (crates/aws/src/billing.rs's sizing,
/// restated: that module's crate brings the AWS SDK with it).
fn item_bytes(key: &Key, value_len: usize, version: u64, expires: Option<i64>) -> usize {
    let number = |n: u64| n.to_string().trim_end_matches('0').len().max(1).div_ceil(2) + 1;
    let mut size = 2 + key.pk.len() + 2 + key.sk.len() + 1 + value_len + 1 + number(version);
    if let Some(ms) = expires {
        let ms = ms.max(0) as u64;
        size += 6 + number(ms) + 10 + number(ms.div_ceil(1000));
    }
    size
}

fn stored_bytes(item: &Item) -> usize {
    item_bytes(&item.key, item.value.len(), item.version, item.expires_at_ms)
}

/// Bytes an operation's item is billed at: a put the larger of before and after.
fn op_bytes(op: &WriteOp, old: Option<&Item>) -> usize {
    let old_bytes = old.map_or(0, stored_bytes);
    match op {
        WriteOp::Put { key, value, expires_at_ms, expect } => {
            let version = match expect {
                Expect::Absent => 1,
                Expect::Version(n) => n + 1,
                Expect::Any => old.map_or(1, |i| i.version + 1),
            };
            old_bytes.max(item_bytes(key, value.len(), version, *expires_at_ms))
        }
        WriteOp::Delete { .. } | WriteOp::Check { .. } => old_bytes,
    }
}

/// The shared table: its items, the keys transactions in flight hold, per-key throughput.
pub struct Dynamo {
    cloud: Arc<Cloud>,
    pub mem: MemStore,
    state: Mutex<State>,
    /// The table's stream as the dispatcher's mapping filters it: the partition key of
    /// every partition-head change, in commit order.
    pub stream: Mutex<Vec<String>>,
}

#[derive(Default)]
struct State {
    held: HashMap<Key, u32>,
    writes: Buckets<Key>,
    reads: Buckets<Key>,
}

impl State {
    /// The first item of `ops` another transaction in flight holds.
    fn held_any(&self, ops: &[WriteOp]) -> Option<Key> {
        ops.iter().map(WriteOp::key).find(|k| self.held.contains_key(*k)).cloned()
    }

    fn hold(&mut self, ops: &[WriteOp]) {
        for op in ops {
            *self.held.entry(op.key().clone()).or_default() += 1;
        }
    }

    fn release(&mut self, ops: &[WriteOp]) {
        for op in ops {
            if let Some(n) = self.held.get_mut(op.key()) {
                *n -= 1;
                if *n == 0 {
                    self.held.remove(op.key());
                }
            }
        }
    }
}

/// One sent request's outcome before the adapter's resends.
enum Sent {
    Done(Result<(), StorageError>),
    Throttled,
}

impl Dynamo {
    pub fn new(cloud: Arc<Cloud>, mem: MemStore) -> Arc<Self> {
        Arc::new(Self { cloud, mem, state: Mutex::default(), stream: Mutex::default() })
    }

    /// Puts the head changes of an applied write on the stream.
    fn record(&self, ops: &[WriteOp]) {
        let changed = ops.iter().filter(|op| !matches!(op, WriteOp::Check { .. })).map(|op| &op.key().pk);
        let heads = changed.filter(|pk| keys::topic_of_heads_pk(pk).is_some()).cloned();
        self.stream.lock().unwrap().extend(heads);
    }

    fn throttled(what: &str) -> StorageError {
        StorageError::Throttled { message: format!("{what}: ThrottlingException"), source: None }
    }

    fn conflict(what: &str) -> StorageError {
        StorageError::Throttled { message: format!("{what}: TransactionConflict"), source: None }
    }

    /// Sends `send` as the adapter does: again after throttling, up to its attempts.
    async fn resend<F, Fut>(&self, what: &str, mut send: F) -> Result<(), StorageError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Sent>,
    {
        for attempt in 0..params::THROTTLED_ATTEMPTS {
            match send().await {
                Sent::Done(r) => return r,
                Sent::Throttled => {
                    self.cloud.count(|m| m.throttles += 1);
                    let wait = params::THROTTLE_BACKOFF.wait_ms(attempt, self.cloud.next_u64());
                    self.cloud.wait(wait as f64).await;
                }
            }
        }
        Err(Self::throttled(what))
    }

    /// Takes write units from each key's bucket, all or none.
    fn take_writes(&self, units: &[(Key, u64)]) -> bool {
        let now = self.cloud.now_ms();
        let mut s = self.state.lock().unwrap();
        // Nothing is taken unless every key has room.
        let ok = units.iter().all(|(k, u)| s.writes.room(k, now, *u as f64, params::ITEM_WRU_PER_S));
        if ok {
            for (k, u) in units {
                s.writes.take(k.clone(), now, *u as f64, params::ITEM_WRU_PER_S);
            }
        }
        ok
    }

    fn take_read(&self, key: &Key, units: u64) -> bool {
        let now = self.cloud.now_ms();
        self.state.lock().unwrap().reads.take(key.clone(), now, units as f64, params::ITEM_RRU_PER_S)
    }

    /// A read of `units` on `key`'s bucket, `pages` requests long, resent while throttled.
    async fn read(&self, what: &str, key: &Key, units: u64, pages: usize, query: bool) -> Result<(), StorageError> {
        for attempt in 0..params::THROTTLED_ATTEMPTS {
            let began = self.cloud.now_ms();
            for _ in 0..pages {
                self.cloud.count(|m| if query { m.ddb_query += 1 } else { m.ddb_get += 1 });
                self.cloud.wait_draw(&params::DDB_READ).await;
            }
            if self.take_read(key, units) {
                self.cloud.count(|m| m.rru += units);
                self.cloud.trace(began, what, "ok");
                return Ok(());
            }
            self.cloud.count(|m| m.throttles += 1);
            self.cloud.trace(began, what, "throttled");
            let wait = params::THROTTLE_BACKOFF.wait_ms(attempt, self.cloud.next_u64());
            self.cloud.wait(wait as f64).await;
        }
        Err(Self::throttled(what))
    }

    /// One `TransactWriteItems` attempt.
    async fn transact_once(&self, ops: &[WriteOp]) -> Sent {
        let began = self.cloud.now_ms();
        let n = ops.len() as f64;
        let dist: Dist = params::DDB_TX5.towards(&params::DDB_TX25, 5.0, 25.0, n);
        self.cloud.count(|m| m.ddb_tx += 1);
        let units: Vec<(Key, u64)> = ops.iter().map(|op| (op.key().clone(), 2 * self.units(op))).collect();
        // Rejected at once, before any work (no waiting for a lock: timestamp ordering).
        let conflict = self.state.lock().unwrap().held_any(ops);
        if let Some(key) = conflict {
            self.cloud.count(|m| m.conflicts += 1);
            self.cloud.wait_draw(&params::DDB_PUT).await;
            let what = format!("ddb TransactWriteItems items={}", ops.len());
            self.cloud.trace(began, &what, &format!("TransactionConflict on {}/{}", key.pk, key.sk));
            return Sent::Done(Err(Self::conflict("dynamodb:TransactWriteItems")));
        }
        if !self.take_writes(&units) {
            self.cloud.wait_draw(&params::DDB_PUT).await;
            self.cloud.trace(began, &format!("ddb TransactWriteItems items={}", ops.len()), "throttled");
            return Sent::Throttled;
        }
        self.state.lock().unwrap().hold(ops);
        let wru: u64 = units.iter().map(|(_, u)| u).sum();
        self.cloud.count(|m| m.wru += wru);
        self.cloud.wait_draw(&dist).await;
        let result = self.mem.write(ops.to_vec()).await;
        self.state.lock().unwrap().release(ops);
        if result.is_ok() {
            self.record(ops);
        }
        let outcome = if result.is_ok() { "ok" } else { "ConditionalCheckFailed" };
        self.cloud.trace(began, &format!("ddb TransactWriteItems items={} wru={wru}", ops.len()), outcome);
        Sent::Done(result)
    }

    /// One `UpdateItem` / `DeleteItem` attempt.
    async fn write_one_once(&self, op: &WriteOp) -> Sent {
        let began = self.cloud.now_ms();
        self.cloud.count(|m| m.ddb_write += 1);
        let units = self.units(op);
        if self.state.lock().unwrap().held.contains_key(op.key()) {
            self.cloud.count(|m| m.conflicts += 1);
            self.cloud.wait_draw(&params::DDB_PUT).await;
            let key = op.key();
            self.cloud.trace(
                began,
                "ddb UpdateItem",
                &format!("TransactionConflictException on {}/{}", key.pk, key.sk),
            );
            return Sent::Done(Err(Self::conflict("dynamodb:UpdateItem")));
        }
        if !self.take_writes(&[(op.key().clone(), units)]) {
            self.cloud.wait_draw(&params::DDB_PUT).await;
            self.cloud.trace(began, "ddb UpdateItem", "throttled");
            return Sent::Throttled;
        }
        self.cloud.count(|m| m.wru += units);
        self.cloud.wait_draw(&params::DDB_PUT).await;
        let result = self.mem.write(vec![op.clone()]).await;
        if result.is_ok() {
            self.record(std::slice::from_ref(op));
        }
        self.cloud.trace(began, &format!("ddb UpdateItem wru={units}"), if result.is_ok() { "ok" } else { "failed" });
        Sent::Done(result)
    }

    fn units(&self, op: &WriteOp) -> u64 {
        op_bytes(op, self.mem.peek(op.key()).as_ref()).div_ceil(WRITE_UNIT).max(1) as u64
    }

    /// Refuses what DynamoDB refuses whatever the load: an item over 400 KB, a
    /// transaction over 100 items or 4 MB.
    fn check_limits(&self, ops: &[WriteOp]) -> Result<(), StorageError> {
        let mut total = 0;
        for op in ops {
            let bytes = op_bytes(op, None);
            if bytes > params::ITEM_MAX_BYTES {
                return Err(StorageError::Invalid(format!("an item of {bytes} bytes exceeds 400 KB")));
            }
            total += bytes;
        }
        if ops.len() > params::TX_MAX_ITEMS || total > params::TX_MAX_BYTES {
            return Err(StorageError::Invalid(format!("a transaction of {} items, {total} bytes", ops.len())));
        }
        Ok(())
    }
}

/// The table as one function instance's adapter sees it.
#[derive(Clone)]
pub struct ModelStore(pub Arc<Dynamo>);

#[async_trait]
impl StateStore for ModelStore {
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        let d = &self.0;
        let units = d.mem.peek(key).as_ref().map_or(0, stored_bytes).div_ceil(READ_UNIT).max(1) as u64;
        d.read("ddb GetItem", key, units, 1, false).await?;
        d.mem.get(key).await
    }

    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        let d = &self.0;
        let page = d.mem.query(query).await?;
        let bytes: usize = page.items.iter().map(stored_bytes).sum();
        let pages = bytes.div_ceil(params::QUERY_PAGE_BYTES).max(1);
        let units = bytes.div_ceil(READ_UNIT).max(1) as u64;
        let collection = Key::new(query.pk.clone(), String::new());
        let what = format!("ddb Query pages={pages} items={}", page.items.len());
        d.read(&what, &collection, units, pages, true).await?;
        // What the collection holds when the last page is read.
        d.mem.query(query).await
    }

    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        validate(&ops)?;
        let sent: Vec<WriteOp> =
            ops.iter().filter(|op| !matches!(op, WriteOp::Check { expect: Expect::Any, .. })).cloned().collect();
        self.0.check_limits(&sent)?;
        let d = &self.0;
        let result = match sent.as_slice() {
            [] => return Ok(()),
            [one @ (WriteOp::Put { .. } | WriteOp::Delete { .. })] => {
                d.resend("dynamodb:UpdateItem", || d.write_one_once(one)).await
            }
            _ => d.resend("dynamodb:TransactWriteItems", || d.transact_once(&sent)).await,
        };
        // The memory store names the operation of the write it was given: map it back.
        match result {
            Err(StorageError::ConditionFailed { failed, .. }) => {
                let original = |i: usize| ops.iter().position(|o| o.key() == sent[i].key()).unwrap_or(i);
                Err(StorageError::condition_failed(failed.into_iter().map(original).collect()))
            }
            other => other,
        }
    }

    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        let d = &self.0;
        for chunk in keys.chunks(25) {
            d.cloud.count(|m| m.ddb_batch += 1);
            d.cloud.wait_draw(&params::DDB_PUT).await;
            let units: u64 = chunk
                .iter()
                .map(|k| d.mem.peek(k).map_or(1, |i| stored_bytes(&i).div_ceil(WRITE_UNIT).max(1) as u64))
                .sum();
            d.cloud.count(|m| m.wru += units);
            d.mem.delete_many(chunk.to_vec()).await?;
        }
        Ok(())
    }

    async fn purge_expired(&self, _limit: usize) -> Result<usize, StorageError> {
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use sluice_core::Clock;

    use super::*;

    /// Runs `f` on a store over an empty table, in paused time.
    fn with_store<F, Fut>(f: F)
    where
        F: FnOnce(ModelStore, Arc<Cloud>) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let cloud = Cloud::new(7, false);
            let clock: Arc<dyn Clock> = cloud.clock.clone();
            f(ModelStore(Dynamo::new(cloud.clone(), MemStore::new(clock))), cloud).await
        });
    }

    fn put(pk: &str, sk: &str) -> WriteOp {
        WriteOp::Put {
            key: Key::new(pk, sk),
            value: Bytes::from_static(b"v"),
            expires_at_ms: None,
            expect: Expect::Any,
        }
    }

    fn check(pk: &str, sk: &str) -> WriteOp {
        WriteOp::Check { key: Key::new(pk, sk), expect: Expect::Absent }
    }

    #[test]
    fn given_two_overlapping_transactions_on_one_item_then_one_is_cancelled() {
        with_store(|store, cloud| async move {
            // Two publishes to different partitions, both checking the topic's record.
            let (a, b) = (store.clone(), store.clone());
            let first = tokio::spawn(async move { a.write(vec![put("head", "0"), check("topic", "t")]).await });
            let second = tokio::spawn(async move { b.write(vec![put("head", "1"), check("topic", "t")]).await });
            let (first, second) = (first.await.unwrap(), second.await.unwrap());
            assert!(first.is_ok(), "the first transaction commits: {first:?}");
            assert!(matches!(second, Err(StorageError::Throttled { .. })), "the second is cancelled: {second:?}");
            assert_eq!(cloud.meter.lock().unwrap().conflicts, 1);
            assert!(store.0.mem.peek(&Key::new("head", "1")).is_none(), "nothing of the cancelled one is written");
            // Once the first has ended, the same write goes through.
            store.write(vec![put("head", "1"), check("topic", "t")]).await.unwrap();
        });
    }

    #[test]
    fn given_a_transaction_in_flight_when_a_single_write_meets_its_item_then_it_is_refused() {
        with_store(|store, cloud| async move {
            let a = store.clone();
            let tx = tokio::spawn(async move { a.write(vec![put("head", "0"), put("seg", "0")]).await });
            tokio::task::yield_now().await;
            let single = store.write(vec![put("head", "0")]).await;
            assert!(matches!(single, Err(StorageError::Throttled { .. })), "{single:?}");
            assert!(tx.await.unwrap().is_ok());
            assert_eq!(cloud.meter.lock().unwrap().conflicts, 1);
        });
    }

    #[test]
    fn transactions_on_different_items_do_not_conflict() {
        with_store(|store, cloud| async move {
            let (a, b) = (store.clone(), store.clone());
            let first = tokio::spawn(async move { a.write(vec![put("head", "0"), put("seg", "0")]).await });
            let second = tokio::spawn(async move { b.write(vec![put("head", "1"), put("seg", "1")]).await });
            assert!(first.await.unwrap().is_ok() && second.await.unwrap().is_ok());
            assert_eq!(cloud.meter.lock().unwrap().conflicts, 0);
        });
    }

    #[test]
    fn one_item_takes_at_most_a_thousand_write_units_a_second() {
        with_store(|store, cloud| async move {
            let began = cloud.now_ms();
            let writes: Vec<_> = (0..3000)
                .map(|_| {
                    let s = store.clone();
                    tokio::spawn(async move { s.write(vec![put("hot", "0")]).await })
                })
                .collect();
            let mut applied = 0;
            for w in writes {
                applied += usize::from(w.await.unwrap().is_ok());
            }
            let seconds = (cloud.now_ms() - began) / 1000.0;
            let bound = params::ITEM_WRU_PER_S * (1.0 + seconds);
            assert!(cloud.meter.lock().unwrap().throttles > 0, "the item was throttled");
            assert!((applied as f64) <= bound, "{applied} writes of 1 WRU in {seconds:.2} s");
            assert!(applied < 3000, "some writes ran out of the adapter's attempts");
        });
    }

    #[test]
    fn writes_spread_over_items_are_not_throttled() {
        with_store(|store, cloud| async move {
            let writes: Vec<_> = (0..3000)
                .map(|i| {
                    let s = store.clone();
                    tokio::spawn(async move { s.write(vec![put("cold", &i.to_string())]).await })
                })
                .collect();
            for w in writes {
                w.await.unwrap().unwrap();
            }
            assert_eq!(cloud.meter.lock().unwrap().throttles, 0);
        });
    }

    #[test]
    fn a_transaction_is_billed_two_units_per_kilobyte_of_each_item() {
        with_store(|store, cloud| async move {
            store.write(vec![put("a", "0"), check("b", "0")]).await.unwrap();
            assert_eq!(cloud.meter.lock().unwrap().wru, 4, "two items, 2 WRU each");
            store.write(vec![put("c", "0")]).await.unwrap();
            assert_eq!(cloud.meter.lock().unwrap().wru, 5, "a single write, 1 WRU");
        });
    }
}
