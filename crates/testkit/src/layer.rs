//! A store wrapped in a layer: the double writes only the calls it changes, and every other
//! call goes to the store underneath unchanged.
//!
//! The contract: a [`StateLayer`] (an [`ObjectLayer`]) that overrides nothing makes
//! [`Layered`] ([`LayeredObjects`]) the inner store exactly. Every method, those with a
//! default in the port too ([`StateStore::write_deferred`], [`ObjectStore::retire`]), is
//! forwarded to the inner store's own implementation, never to the port's default. So a
//! layer that overrides `write` does not see `write_deferred`: it overrides that as well
//! when it should (e.g. by calling its own `write`). One exception, [`StateStore::read_many`]:
//! by default a layer makes its reads one by one through its own `get` and `query`, so a
//! layer that changes reads (faults, namespaces, counts) changes batched reads alike.
//!
//! A layered store derefs to its layer, so a double's own knobs and counters (a script's
//! rules, the deletes it counted) are called on the store a case holds.

use std::ops::Deref;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::ports::objects::ObjectInfo;
use sluice_core::ports::state::{Found, Item, Key, Page, Query, Read, StateStore, WriteOp};
use sluice_core::{BlobRef, ObjectStore, StorageError};

/// What a state-store double changes. Each method gets the inner store; by default it
/// forwards the call to it.
#[async_trait]
pub trait StateLayer: Send + Sync + 'static {
    async fn get(&self, inner: &dyn StateStore, key: &Key) -> Result<Option<Item>, StorageError> {
        inner.get(key).await
    }

    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        inner.query(query).await
    }

    /// The reads one by one through this layer's own `get` and `query` (see the module doc).
    async fn read_many(&self, inner: &dyn StateStore, reads: &[Read]) -> Result<Vec<Found>, StorageError> {
        let mut found = Vec::with_capacity(reads.len());
        for read in reads {
            found.push(match read {
                Read::Get(key) => Found::Item(self.get(inner, key).await?),
                Read::Query(query) => Found::Page(self.query(inner, query).await?),
            });
        }
        Ok(found)
    }

    fn cheap_batched_reads(&self, inner: &dyn StateStore) -> bool {
        inner.cheap_batched_reads()
    }

    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        inner.write(ops).await
    }

    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        inner.write_deferred(ops).await
    }

    async fn delete_many(&self, inner: &dyn StateStore, keys: Vec<Key>) -> Result<(), StorageError> {
        inner.delete_many(keys).await
    }

    async fn purge_expired(&self, inner: &dyn StateStore, limit: usize) -> Result<usize, StorageError> {
        inner.purge_expired(limit).await
    }
}

/// What an object-store double changes. Each method gets the inner store; by default it
/// forwards the call to it.
#[async_trait]
pub trait ObjectLayer: Send + Sync + 'static {
    async fn put(&self, inner: &dyn ObjectStore, bytes: Bytes) -> Result<BlobRef, StorageError> {
        inner.put(bytes).await
    }

    async fn read(
        &self,
        inner: &dyn ObjectStore,
        object: &str,
        position: u64,
        len: u64,
    ) -> Result<Bytes, StorageError> {
        inner.read(object, position, len).await
    }

    async fn list(
        &self,
        inner: &dyn ObjectStore,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ObjectInfo>, StorageError> {
        inner.list(after, limit).await
    }

    async fn delete(&self, inner: &dyn ObjectStore, object: &str) -> Result<(), StorageError> {
        inner.delete(object).await
    }

    fn retire(&self, inner: &dyn ObjectStore, object: &str) {
        inner.retire(object)
    }
}

/// A state store: `inner` seen through `layer`.
pub struct Layered<L> {
    inner: Arc<dyn StateStore>,
    layer: L,
}

impl<L> Layered<L> {
    pub fn new(inner: Arc<dyn StateStore>, layer: L) -> Self {
        Self { inner, layer }
    }

    pub fn layer(&self) -> &L {
        &self.layer
    }

    pub fn inner(&self) -> &Arc<dyn StateStore> {
        &self.inner
    }
}

impl<L> Deref for Layered<L> {
    type Target = L;

    fn deref(&self) -> &L {
        &self.layer
    }
}

#[async_trait]
impl<L: StateLayer> StateStore for Layered<L> {
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        self.layer.get(&*self.inner, key).await
    }

    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        self.layer.query(&*self.inner, query).await
    }

    async fn read_many(&self, reads: &[Read]) -> Result<Vec<Found>, StorageError> {
        self.layer.read_many(&*self.inner, reads).await
    }

    fn cheap_batched_reads(&self) -> bool {
        self.layer.cheap_batched_reads(&*self.inner)
    }

    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.layer.write(&*self.inner, ops).await
    }

    async fn write_deferred(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.layer.write_deferred(&*self.inner, ops).await
    }

    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        self.layer.delete_many(&*self.inner, keys).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        self.layer.purge_expired(&*self.inner, limit).await
    }
}

/// An object store: `inner` seen through `layer`.
pub struct LayeredObjects<L> {
    inner: Arc<dyn ObjectStore>,
    layer: L,
}

impl<L> LayeredObjects<L> {
    pub fn new(inner: Arc<dyn ObjectStore>, layer: L) -> Self {
        Self { inner, layer }
    }

    pub fn layer(&self) -> &L {
        &self.layer
    }

    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }
}

impl<L> Deref for LayeredObjects<L> {
    type Target = L;

    fn deref(&self) -> &L {
        &self.layer
    }
}

#[async_trait]
impl<L: ObjectLayer> ObjectStore for LayeredObjects<L> {
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError> {
        self.layer.put(&*self.inner, bytes).await
    }

    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
        self.layer.read(&*self.inner, object, position, len).await
    }

    async fn list(&self, after: Option<&str>, limit: usize) -> Result<Vec<ObjectInfo>, StorageError> {
        self.layer.list(&*self.inner, after, limit).await
    }

    async fn delete(&self, object: &str) -> Result<(), StorageError> {
        self.layer.delete(&*self.inner, object).await
    }

    fn retire(&self, object: &str) {
        self.layer.retire(&*self.inner, object)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use sluice_core::ports::state::Expect;
    use sluice_core::SystemClock;

    use super::*;
    use crate::mem::{MemObjects, MemStore};

    /// Overrides nothing.
    struct Through;
    impl StateLayer for Through {}
    impl ObjectLayer for Through {}

    /// Sees every write (and refuses none).
    #[derive(Default)]
    struct Writes(Mutex<Vec<Vec<WriteOp>>>);

    #[async_trait]
    impl StateLayer for Writes {
        async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
            self.0.lock().unwrap().push(ops.clone());
            inner.write(ops).await
        }
    }

    fn put(sk: &str, expect: Expect) -> WriteOp {
        WriteOp::Put { key: Key::new("p", sk), value: Bytes::from_static(b"v"), expires_at_ms: None, expect }
    }

    fn mem() -> MemStore {
        MemStore::new(Arc::new(SystemClock))
    }

    #[tokio::test]
    async fn a_layer_that_overrides_nothing_is_the_inner_store() {
        let inner = mem();
        let store = Layered::new(Arc::new(inner.clone()), Through);
        store.write(vec![put("a", Expect::Absent), put("b", Expect::Absent)]).await.unwrap();
        assert!(matches!(
            store.write(vec![put("a", Expect::Absent)]).await,
            Err(StorageError::ConditionFailed { op: 0, .. })
        ));
        assert_eq!(store.get(&Key::new("p", "a")).await.unwrap(), inner.peek(&Key::new("p", "a")));
        assert_eq!(store.query(&Query::all("p", 10)).await.unwrap().items, inner.peek_all("p"));
        store.delete_many(vec![Key::new("p", "b")]).await.unwrap();
        assert_eq!(inner.keys(), vec![Key::new("p", "a")]);
        assert_eq!(store.purge_expired(10).await.unwrap(), 0);

        // The inner store's own `write_deferred`, not the port's default (a durable write).
        let durable = inner.durable_count();
        store.write_deferred(vec![put("c", Expect::Absent)]).await.unwrap();
        assert_eq!((inner.at_risk(), inner.durable_count()), (1, durable));

        let objects = MemObjects::new(Arc::new(SystemClock));
        let layered = LayeredObjects::new(Arc::new(objects.clone()), Through);
        let blob = layered.put(Bytes::from_static(b"hello")).await.unwrap();
        assert_eq!(objects.peek(&blob.object), Some(Bytes::from_static(b"hello")));
        assert_eq!(layered.read(&blob.object, 1, 3).await.unwrap(), Bytes::from_static(b"ell"));
        let listed = layered.list(None, 10).await.unwrap();
        assert_eq!(listed.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), [blob.object.as_str()]);
        layered.retire(&blob.object);
        layered.delete(&blob.object).await.unwrap();
        assert_eq!(objects.peek(&blob.object), None);
    }

    #[tokio::test]
    async fn a_layer_that_overrides_write_sees_the_writes_and_passes_the_rest_through() {
        let inner = mem();
        let store = Layered::new(Arc::new(inner.clone()), Writes::default());
        let first = vec![put("a", Expect::Absent)];
        store.write(first.clone()).await.unwrap();
        store.write_deferred(vec![put("b", Expect::Absent)]).await.unwrap();
        assert_eq!(*store.layer().0.lock().unwrap(), vec![first.clone()], "only `write`, not `write_deferred`");
        assert_eq!(*store.0.lock().unwrap(), vec![first], "the store derefs to its layer");
        assert_eq!(inner.at_risk(), 1, "the deferred write reached the inner store's own");
        assert_eq!(inner.keys(), vec![Key::new("p", "a"), Key::new("p", "b")]);
        assert_eq!(store.get(&Key::new("p", "b")).await.unwrap().map(|i| i.version), Some(1));
        assert_eq!(store.query(&Query::all("p", 1)).await.unwrap().next.as_deref(), Some("a"));
    }
}
