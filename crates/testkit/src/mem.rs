//! In-memory implementations of both ports, honouring their contracts exactly: the
//! simulator's ground truth (the checker reads them directly, without faults).
//!
//! [`MemStore`] follows the SQLite adapter (`crates/local/src/state/`): versions start at
//! 1 and grow by one per put; an expired item reads as absent and counts as absent in
//! conditions, but a put under [`Expect::Any`] over it continues from its version (as
//! DynamoDB's `ADD` does before TTL removes the item); reads are snapshots (the fault layer
//! makes them not, the way DynamoDB's queries are not). [`MemObjects`] names objects by
//! creation time (13 digits of the clock's milliseconds, then a sequence number), so a
//! listing meets old objects first, as the trait says; every put is an object of its own
//! (S3's model), so `retire` has nothing to do.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::ports::objects::ObjectInfo;
use sluice_core::ports::state::{validate, Expect, Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{BlobRef, Clock, ObjectStore, StorageError};

#[derive(Debug, Clone)]
struct Stored {
    value: Bytes,
    version: u64,
    expires_at_ms: Option<i64>,
}

impl Stored {
    fn live(&self, now: i64) -> bool {
        self.expires_at_ms.is_none_or(|e| e > now)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every item, in key order (pk, then sk, both as byte strings).
#[derive(Default)]
pub struct MemData {
    items: BTreeMap<Key, Stored>,
    /// The writes answered without being durable since the last durable one
    /// ([`StateStore::write_deferred`]), oldest first: per write, what it replaced at each
    /// key (`None`: nothing), for a power cut to undo.
    at_risk: Vec<Vec<(Key, Option<Stored>)>>,
    /// Grows with every durable write: a deferred write applied while it read `n` is
    /// durable once it reads more.
    durable: u64,
}

/// A transactional key-value store in memory. Handles made with [`MemStore::handle`] share
/// the data and read time from a clock of their own (as another process would).
#[derive(Clone)]
pub struct MemStore {
    data: Arc<Mutex<MemData>>,
    clock: Arc<dyn Clock>,
}

impl MemStore {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { data: Arc::default(), clock }
    }

    /// Another handle on the same data, reading time from `clock`.
    pub fn handle(&self, clock: Arc<dyn Clock>) -> Self {
        Self { data: self.data.clone(), clock }
    }

    /// The live item at `key`, without faults: for the checker.
    pub fn peek(&self, key: &Key) -> Option<Item> {
        let now = self.clock.now_ms();
        let data = lock(&self.data);
        data.items.get(key).filter(|s| s.live(now)).map(|s| item(key, s))
    }

    /// Every live item of one collection, in order, without faults: for the checker.
    pub fn peek_all(&self, pk: &str) -> Vec<Item> {
        let now = self.clock.now_ms();
        let data = lock(&self.data);
        let from = Key::new(pk, "");
        data.items
            .range(from..)
            .take_while(|(k, _)| k.pk == pk)
            .filter(|(_, s)| s.live(now))
            .map(|(k, s)| item(k, s))
            .collect()
    }

    /// How many durable writes were applied: a deferred write is durable once this grows.
    pub fn durable_count(&self) -> u64 {
        lock(&self.data).durable
    }

    /// A power cut: of the deferred writes since the last durable one, the first
    /// `survivors` stay and the others are undone, newest first (what survives a cut is a
    /// prefix of the writes, as [`StateStore::write_deferred`] says). Answers how many
    /// were undone.
    pub fn power_cut(&self, survivors: usize) -> usize {
        let mut data = lock(&self.data);
        let keep = survivors.min(data.at_risk.len());
        let lost = data.at_risk.split_off(keep);
        for write in lost.iter().rev() {
            for (key, before) in write.iter().rev() {
                match before {
                    Some(stored) => data.items.insert(key.clone(), stored.clone()),
                    None => data.items.remove(key),
                };
            }
        }
        data.at_risk.clear();
        lost.len()
    }

    /// How many deferred writes a power cut now could undo.
    pub fn at_risk(&self) -> usize {
        lock(&self.data).at_risk.len()
    }

    /// A durable change (a write, or deletes) was applied: every earlier one is durable too.
    fn made_durable(data: &mut MemData) {
        data.at_risk.clear();
        data.durable += 1;
    }

    /// How many items are stored (expired ones included).
    pub fn len(&self) -> usize {
        lock(&self.data).items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every stored key (expired items included).
    pub fn keys(&self) -> Vec<Key> {
        lock(&self.data).items.keys().cloned().collect()
    }

    /// The collections with at least one item, and how many each holds (expired included).
    pub fn census(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for k in lock(&self.data).items.keys() {
            *out.entry(k.pk.clone()).or_insert(0) += 1;
        }
        out
    }

    fn query_now(&self, query: &Query) -> Page {
        let now = self.clock.now_ms();
        let limit = query.limit.max(1);
        let data = lock(&self.data);
        let lo = Key::new(query.pk.clone(), query.from.clone().unwrap_or_default());
        let in_bounds = |k: &Key| {
            k.pk == query.pk
                && query.from.as_ref().is_none_or(|f| k.sk.as_str() >= f.as_str())
                && query.to.as_ref().is_none_or(|t| k.sk.as_str() <= t.as_str())
                && query.after.as_ref().is_none_or(|a| {
                    if query.forward {
                        k.sk.as_str() > a.as_str()
                    } else {
                        k.sk.as_str() < a.as_str()
                    }
                })
        };
        let mut items = Vec::with_capacity(limit + 1);
        if query.forward {
            for (k, s) in data.items.range(lo..).take_while(|(k, _)| k.pk == query.pk) {
                if query.to.as_ref().is_some_and(|t| k.sk.as_str() > t.as_str()) {
                    break;
                }
                if in_bounds(k) && s.live(now) {
                    items.push(item(k, s));
                    if items.len() > limit {
                        break;
                    }
                }
            }
        } else {
            let hi = match &query.to {
                Some(t) => std::ops::Bound::Included(Key::new(query.pk.clone(), t.clone())),
                None => std::ops::Bound::Excluded(Key::new(format!("{}\u{0}", query.pk), String::new())),
            };
            for (k, s) in data.items.range((std::ops::Bound::Included(lo), hi)).rev() {
                if k.pk != query.pk {
                    continue;
                }
                if in_bounds(k) && s.live(now) {
                    items.push(item(k, s));
                    if items.len() > limit {
                        break;
                    }
                }
            }
        }
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|i| i.key.sk.clone())
        } else {
            None
        };
        Page { items, next }
    }

    fn write_now(&self, ops: Vec<WriteOp>, durable: bool) -> Result<(), StorageError> {
        validate(&ops)?;
        let now = self.clock.now_ms();
        let mut data = lock(&self.data);
        // Every failed condition, as DynamoDB's cancellation reasons list them.
        let failed: Vec<usize> = (ops.iter().enumerate())
            .filter(|(_, op)| {
                let current = data.items.get(op.key()).filter(|s| s.live(now)).map(|s| s.version);
                match op.expect() {
                    Expect::Any => false,
                    Expect::Absent => current.is_some(),
                    Expect::Version(n) => current != Some(n),
                }
            })
            .map(|(i, _)| i)
            .collect();
        if !failed.is_empty() {
            return Err(StorageError::condition_failed(failed));
        }
        if durable {
            Self::made_durable(&mut data);
        } else {
            let before = ops
                .iter()
                .filter(|op| !matches!(op, WriteOp::Check { .. }))
                .map(|op| (op.key().clone(), data.items.get(op.key()).cloned()))
                .collect();
            data.at_risk.push(before);
        }
        for op in ops {
            match op {
                WriteOp::Put { key, value, expires_at_ms, expect } => {
                    let version = match expect {
                        Expect::Absent => 1,
                        Expect::Version(n) => n + 1,
                        // Over an expired item too, as SQLite and DynamoDB's ADD do.
                        Expect::Any => data.items.get(&key).map_or(1, |s| s.version + 1),
                    };
                    data.items.insert(key, Stored { value, version, expires_at_ms });
                }
                WriteOp::Delete { key, .. } => {
                    data.items.remove(&key);
                }
                WriteOp::Check { .. } => {}
            }
        }
        Ok(())
    }
}

fn item(k: &Key, s: &Stored) -> Item {
    Item { key: k.clone(), value: s.value.clone(), version: s.version, expires_at_ms: s.expires_at_ms }
}

#[async_trait]
impl StateStore for MemStore {
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        Ok(self.peek(key))
    }

    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        Ok(self.query_now(query))
    }

    /// A read is a lock and a clone: a guessed one costs next to nothing.
    fn cheap_batched_reads(&self) -> bool {
        true
    }

    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write_now(ops, true)
    }

    async fn write_deferred(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write_now(ops, false)
    }

    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        let mut data = lock(&self.data);
        // As the SQLite store: no keys, no transaction, nothing synced.
        if !keys.is_empty() {
            Self::made_durable(&mut data);
        }
        for k in keys {
            data.items.remove(&k);
        }
        Ok(())
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        let now = self.clock.now_ms();
        let mut data = lock(&self.data);
        Self::made_durable(&mut data);
        let gone: Vec<Key> =
            data.items.iter().filter(|(_, s)| !s.live(now)).take(limit).map(|(k, _)| k.clone()).collect();
        for k in &gone {
            data.items.remove(k);
        }
        Ok(gone.len())
    }
}

#[derive(Default)]
struct Blobs {
    objects: BTreeMap<String, (Bytes, i64)>,
    seq: u64,
    deleted: u64,
}

/// Immutable blobs in memory, one object per put.
#[derive(Clone)]
pub struct MemObjects {
    blobs: Arc<Mutex<Blobs>>,
    clock: Arc<dyn Clock>,
}

impl MemObjects {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { blobs: Arc::default(), clock }
    }

    pub fn handle(&self, clock: Arc<dyn Clock>) -> Self {
        Self { blobs: self.blobs.clone(), clock }
    }

    /// The bytes of an object, without faults: for the checker.
    pub fn peek(&self, object: &str) -> Option<Bytes> {
        lock(&self.blobs).objects.get(object).map(|(b, _)| b.clone())
    }

    /// (objects stored, bytes stored, objects deleted so far).
    pub fn stats(&self) -> (usize, u64, u64) {
        let b = lock(&self.blobs);
        (b.objects.len(), b.objects.values().map(|(x, _)| x.len() as u64).sum(), b.deleted)
    }
}

#[async_trait]
impl ObjectStore for MemObjects {
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError> {
        let now = self.clock.now_ms();
        let mut b = lock(&self.blobs);
        b.seq += 1;
        let name = format!("{:013}-{:010}.blob", now.max(0), b.seq);
        b.objects.insert(name.clone(), (bytes, now));
        Ok(BlobRef { object: name, position: 0 })
    }

    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
        let b = lock(&self.blobs);
        let Some((bytes, _)) = b.objects.get(object) else { return Err(StorageError::NotFound(object.to_owned())) };
        let end = position.checked_add(len).filter(|e| *e <= bytes.len() as u64);
        match end {
            Some(end) => Ok(bytes.slice(position as usize..end as usize)),
            None => {
                Err(StorageError::Corrupt(format!("{object}: {len} bytes at {position} asked, {} stored", bytes.len())))
            }
        }
    }

    async fn list(&self, after: Option<&str>, limit: usize) -> Result<Vec<ObjectInfo>, StorageError> {
        let b = lock(&self.blobs);
        let from = match after {
            Some(a) => std::ops::Bound::Excluded(a.to_owned()),
            None => std::ops::Bound::Unbounded,
        };
        Ok(b.objects
            .range::<String, _>((from, std::ops::Bound::Unbounded))
            .take(limit)
            .map(|(name, (bytes, created_ms))| ObjectInfo {
                name: name.clone(),
                size: bytes.len() as u64,
                created_ms: *created_ms,
            })
            .collect())
    }

    async fn delete(&self, object: &str) -> Result<(), StorageError> {
        let mut b = lock(&self.blobs);
        if b.objects.remove(object).is_some() {
            b.deleted += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(sk: &str, value: &'static str, expect: Expect) -> WriteOp {
        WriteOp::Put {
            key: Key::new("p", sk),
            value: Bytes::from_static(value.as_bytes()),
            expires_at_ms: None,
            expect,
        }
    }

    fn values(store: &MemStore) -> Vec<(String, String, u64)> {
        let items = store.peek_all("p");
        items.into_iter().map(|i| (i.key.sk, String::from_utf8(i.value.to_vec()).unwrap(), i.version)).collect()
    }

    fn owned(rows: &[(&str, &str, u64)]) -> Vec<(String, String, u64)> {
        rows.iter().map(|(k, v, n)| (k.to_string(), v.to_string(), *n)).collect()
    }

    #[tokio::test]
    async fn a_power_cut_undoes_the_deferred_writes_no_durable_write_followed_newest_first() {
        let store = MemStore::new(Arc::new(sluice_core::SystemClock));
        store.write(vec![put("a", "a1", Expect::Absent)]).await.unwrap();
        store.write_deferred(vec![put("a", "a2", Expect::Version(1))]).await.unwrap();
        store.write(vec![put("b", "b1", Expect::Absent)]).await.unwrap();
        assert_eq!(store.at_risk(), 0, "a durable write makes the deferred one before it durable");
        let durable = store.durable_count();
        store.write_deferred(vec![put("a", "a3", Expect::Version(2)), put("c", "c1", Expect::Absent)]).await.unwrap();
        store.write_deferred(vec![put("a", "a4", Expect::Version(3))]).await.unwrap();
        store.write_deferred(vec![WriteOp::Delete { key: Key::new("p", "b"), expect: Expect::Any }]).await.unwrap();
        assert_eq!((store.at_risk(), store.durable_count()), (3, durable));

        assert_eq!(store.power_cut(1), 2, "the first survives, the two after it are undone");
        assert_eq!(values(&store), owned(&[("a", "a3", 3), ("b", "b1", 1), ("c", "c1", 1)]));
        assert_eq!(store.at_risk(), 0);
        assert_eq!(store.power_cut(0), 0, "nothing left to lose");
    }
}
