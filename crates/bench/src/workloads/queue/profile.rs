//! The profile of `queue --embedded`: state and object stores that count their calls (how
//! many, how long, per receive and per ack), optionally serving what a run never changes
//! from memory.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Value};
use sluice_core::ports::objects::ObjectInfo;
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{BlobRef, ObjectStore, StorageError};
use sluice_testkit::{ObjectLayer, StateLayer};

tokio::task_local! {
    /// What the calling task is doing: `receive`, `ack`; anything else is `other`.
    pub static OP: &'static str;
}

/// Calls, items written and time, per (operation, store call, item kind).
#[derive(Default)]
pub struct Profile {
    calls: Mutex<BTreeMap<(&'static str, &'static str, String), CallStats>>,
}

#[derive(Default, Clone, Copy)]
struct CallStats {
    calls: u64,
    /// Items written (writes) or returned (queries), or bytes read (object reads).
    items: u64,
    nanos: u64,
}

impl Profile {
    pub fn reset(&self) {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    async fn time<T>(
        &self,
        call: &'static str,
        kind: String,
        fut: impl Future<Output = Result<T, StorageError>>,
        items: impl FnOnce(&T) -> u64,
    ) -> Result<T, StorageError> {
        let op = OP.try_with(|o| *o).unwrap_or("other");
        let t0 = Instant::now();
        let result = fut.await;
        let nanos = t0.elapsed().as_nanos() as u64;
        let n = result.as_ref().map_or(0, items);
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let stats = calls.entry((op, call, kind)).or_default();
        stats.calls += 1;
        stats.items += n;
        stats.nanos += nanos;
        result
    }

    /// Per receive and per ack: each kind of call, how many, how long; JSON and lines of text.
    pub fn report(&self, receives: u64, acks: u64) -> (Value, Vec<String>) {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let mut json = serde_json::Map::new();
        let mut lines = Vec::new();
        for (op, n) in [("receive", receives), ("ack", acks)] {
            let per = |x: u64| x as f64 / n.max(1) as f64;
            lines.push(format!("store calls per {op} ({n} {op}s; mean wall time per call, items per call):"));
            let mut rows = Vec::new();
            let (mut total, mut writes) = (0, 0);
            for ((_, call, kind), s) in calls.iter().filter(|((o, ..), _)| *o == op) {
                if !call.ends_with(".cached") {
                    total += s.calls;
                }
                if *call == "write" {
                    writes += s.calls;
                }
                let mean_us = s.nanos as f64 / s.calls.max(1) as f64 / 1000.0;
                let items = s.items as f64 / s.calls.max(1) as f64;
                lines.push(format!(
                    "  {:<14}{:<30}{:>8.2}{:>10.1} µs{:>10.1} items",
                    call,
                    kind,
                    per(s.calls),
                    mean_us,
                    items
                ));
                rows.push(json!({ "call": call, "kind": kind, "per_op": per(s.calls), "mean_us": mean_us, "items_per_call": items }));
            }
            let store_calls = calls
                .iter()
                .filter(|((o, c, _), _)| *o == op && !c.starts_with("object") && !c.ends_with(".cached"))
                .map(|(_, s)| s.calls)
                .sum::<u64>();
            lines.push(format!(
                "  total {:.2} calls ({:.2} state store), {:.2} writes (each one SQLite commit: one WAL fsync) per {op}",
                per(total),
                per(store_calls),
                per(writes)
            ));
            json.insert(
                op.to_owned(),
                json!({ "ops": n, "calls": rows, "calls_per_op": per(total), "writes_per_op": per(writes) }),
            );
        }
        (Value::Object(json), lines)
    }
}

/// What an item is, from its key (the layouts of `sluice_core::layout` and `queues`).
fn key_kind(key: &Key) -> String {
    let kind = match key.pk.split('#').next().unwrap_or_default() {
        "q" if key.sk == "c" => "queue cursor",
        "q" => "queue lease",
        "subs" => "subscription",
        "head" => "partition head",
        "seg" => "segment index",
        "topics" => "topic",
        "queues" => "receipt key",
        "dlq" => "dead letter",
        "idem" => "idempotency",
        other => return other.to_owned(),
    };
    kind.to_owned()
}

/// A write's kinds of items, e.g. `queue cursor+queue lease`.
fn write_kind(ops: &[WriteOp]) -> String {
    let mut kinds: Vec<String> = ops.iter().map(|op| key_kind(op.key())).collect();
    kinds.sort();
    kinds.dedup();
    kinds.join("+")
}

/// The local state store's calls, counted into a [`Profile`]: a layer over it.
pub struct CountingStore {
    pub profile: Arc<Profile>,
    /// `--cache-immutable`: items of the kinds a run never changes, once read.
    pub cache: Option<Mutex<HashMap<Key, Item>>>,
}

/// Kinds of items `--cache-immutable` serves from memory: a queue run never writes them.
fn cacheable(kind: &str) -> bool {
    matches!(kind, "topic" | "subscription" | "receipt key")
}

#[async_trait]
impl StateLayer for CountingStore {
    async fn get(&self, inner: &dyn StateStore, key: &Key) -> Result<Option<Item>, StorageError> {
        let kind = key_kind(key);
        let Some(cache) = self.cache.as_ref().filter(|_| cacheable(&kind)) else {
            return self.profile.time("get", kind, inner.get(key), |i| u64::from(i.is_some())).await;
        };
        let cached = cache.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned();
        if let Some(item) = cached {
            return self.profile.time("get.cached", kind, async { Ok(Some(item)) }, |_| 1).await;
        }
        let item = self.profile.time("get", kind, inner.get(key), |i| u64::from(i.is_some())).await?;
        if let Some(item) = &item {
            cache.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), item.clone());
        }
        Ok(item)
    }

    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        let kind = key_kind(&Key::new(query.pk.clone(), ""));
        self.profile.time("query", kind, inner.query(query), |p| p.items.len() as u64).await
    }

    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let (kind, n) = (write_kind(&ops), ops.len() as u64);
        if let Some(cache) = &self.cache {
            let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
            for op in &ops {
                cache.remove(op.key());
            }
        }
        self.profile.time("write", kind, inner.write(ops), move |_| n).await
    }

    /// A deferred write (an ack's) is counted, and made, as a durable one: what this store
    /// did when it took the port's default `write_deferred`.
    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write(inner, ops).await
    }

    async fn delete_many(&self, inner: &dyn StateStore, keys: Vec<Key>) -> Result<(), StorageError> {
        let n = keys.len() as u64;
        self.profile.time("delete_many", String::new(), inner.delete_many(keys), move |_| n).await
    }

    async fn purge_expired(&self, inner: &dyn StateStore, limit: usize) -> Result<usize, StorageError> {
        self.profile.time("purge_expired", String::new(), inner.purge_expired(limit), |n| *n as u64).await
    }
}

/// An object, a position in it and a length.
type BlobRange = (String, u64, u64);

/// The local object store's calls, counted into a [`Profile`]: a layer over it.
pub struct CountingObjects {
    pub profile: Arc<Profile>,
    /// `--cache-immutable`: blob ranges once read (blobs never change), at most 1 GiB.
    pub cache: Option<Mutex<HashMap<BlobRange, Bytes>>>,
}

#[async_trait]
impl ObjectLayer for CountingObjects {
    async fn put(&self, inner: &dyn ObjectStore, bytes: Bytes) -> Result<BlobRef, StorageError> {
        let n = bytes.len() as u64;
        self.profile.time("object.put", "blob".to_owned(), inner.put(bytes), move |_| n).await
    }

    async fn read(
        &self,
        inner: &dyn ObjectStore,
        object: &str,
        position: u64,
        len: u64,
    ) -> Result<Bytes, StorageError> {
        let kind = "blob (items: bytes)".to_owned();
        let Some(cache) = &self.cache else {
            return self.profile.time("object.read", kind, inner.read(object, position, len), |b| b.len() as u64).await;
        };
        let at = (object.to_owned(), position, len);
        let cached = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&at).cloned();
        if let Some(bytes) = cached {
            return self.profile.time("object.read.cached", kind, async { Ok(bytes) }, |b| b.len() as u64).await;
        }
        let bytes =
            self.profile.time("object.read", kind, inner.read(object, position, len), |b| b.len() as u64).await?;
        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.values().map(Bytes::len).sum::<usize>() > 1 << 30 {
            cache.clear();
        }
        cache.insert(at, bytes.clone());
        Ok(bytes)
    }

    async fn list(
        &self,
        inner: &dyn ObjectStore,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ObjectInfo>, StorageError> {
        self.profile.time("object.list", "objects".to_owned(), inner.list(after, limit), |l| l.len() as u64).await
    }

    async fn delete(&self, inner: &dyn ObjectStore, object: &str) -> Result<(), StorageError> {
        self.profile.time("object.delete", "object".to_owned(), inner.delete(object), |()| 1).await
    }
}
