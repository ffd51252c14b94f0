//! A janitor's view of one case's world.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::layout::{self, ObjectRecord};
use sluice_core::ports::objects::ObjectInfo;
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::upkeep::{Janitor, JanitorConfig};
use sluice_core::{BlobRef, Clock, Log, ManualClock, ObjectStore, StorageError, SystemClock, TopicSpec};
use sluice_testkit::{Layered, LayeredObjects, ObjectLayer, StateLayer};

use crate::cases::support::faults::Scripted;
use crate::{unique_topic, Backend};

/// What a scoped janitor sees: these topics (and their purge orders) and objects; its own
/// cursors (`upkeep` items are kept per scope).
#[derive(Default)]
pub(super) struct Scope {
    pub(super) tag: String,
    pub(super) topics: Mutex<HashSet<String>>,
    /// Purge order sort keys (topic ids).
    pub(super) ids: Mutex<HashSet<String>>,
    pub(super) objects: Mutex<HashSet<String>>,
}

/// A state-store layer that hides from a janitor everything outside its [`Scope`]: other
/// topics, purge orders, free-list entries, subscription purges and group expiries.
pub(super) struct ScopedStore {
    pub(super) scope: Arc<Scope>,
}

impl ScopedStore {
    fn key(&self, key: &Key) -> Key {
        if key.pk == sluice_core::keys::UPKEEP_PK {
            Key::new(sluice_core::keys::UPKEEP_PK, format!("{}#{}", key.sk, self.scope.tag))
        } else {
            key.clone()
        }
    }

    fn op(&self, op: WriteOp) -> WriteOp {
        match op {
            WriteOp::Put { key, value, expires_at_ms, expect } => {
                WriteOp::Put { key: self.key(&key), value, expires_at_ms, expect }
            }
            WriteOp::Delete { key, expect } => WriteOp::Delete { key: self.key(&key), expect },
            WriteOp::Check { key, expect } => WriteOp::Check { key: self.key(&key), expect },
        }
    }

    fn visible(&self, pk: &str, sk: &str) -> bool {
        if pk == sluice_core::keys::topics_pk() {
            self.scope.topics.lock().unwrap().contains(sk)
        } else if pk == sluice_core::keys::purge_pk() {
            self.scope.ids.lock().unwrap().contains(sk)
        } else if pk.starts_with(sluice_core::keys::FREE_PREFIX) {
            self.scope.objects.lock().unwrap().contains(sk)
        } else {
            !(pk == sluice_core::keys::sub_purge_pk() || pk == sluice_core::keys::expiry_pk())
        }
    }
}

#[async_trait]
impl StateLayer for ScopedStore {
    async fn get(&self, inner: &dyn StateStore, key: &Key) -> Result<Option<Item>, StorageError> {
        let item = inner.get(&self.key(key)).await?;
        Ok(item.map(|i| Item { key: key.clone(), ..i }))
    }

    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        let mut page = inner.query(query).await?;
        page.items.retain(|i| self.visible(&i.key.pk, &i.key.sk));
        Ok(page)
    }

    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        inner.write(ops.into_iter().map(|op| self.op(op)).collect()).await
    }

    /// As a write (the port's default for a store without the distinction).
    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write(inner, ops).await
    }

    async fn delete_many(&self, inner: &dyn StateStore, keys: Vec<Key>) -> Result<(), StorageError> {
        inner.delete_many(keys.iter().map(|k| self.key(k)).collect()).await
    }
}

/// An object-store layer that records the objects put through it in a [`Scope`], and lists
/// only those.
pub(super) struct ScopedObjects {
    pub(super) scope: Arc<Scope>,
}

impl ScopedObjects {
    /// `inner` seen through `scope`.
    pub(super) fn over(inner: Arc<dyn ObjectStore>, scope: &Arc<Scope>) -> Arc<LayeredObjects<Self>> {
        Arc::new(LayeredObjects::new(inner, Self { scope: scope.clone() }))
    }
}

#[async_trait]
impl ObjectLayer for ScopedObjects {
    async fn put(&self, inner: &dyn ObjectStore, bytes: Bytes) -> Result<BlobRef, StorageError> {
        let at = inner.put(bytes).await?;
        self.scope.objects.lock().unwrap().insert(at.object.clone());
        Ok(at)
    }

    async fn list(
        &self,
        inner: &dyn ObjectStore,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ObjectInfo>, StorageError> {
        const PAGE: usize = 1000;
        let mut after = after.map(str::to_owned);
        let mut mine = Vec::new();
        loop {
            let page = inner.list(after.as_deref(), PAGE).await?;
            let full = page.len() == PAGE;
            after = page.last().map(|i| i.name.clone());
            let scope = self.scope.objects.lock().unwrap().clone();
            mine.extend(page.into_iter().filter(|i| scope.contains(&i.name)));
            if mine.len() >= limit || !full {
                mine.truncate(limit);
                return Ok(mine);
            }
        }
    }
}

/// One case's world for a janitor: a topic, the objects its logs put, a fake clock at the
/// real time (so object stores' own timestamps and the collector's judgement of age agree),
/// and janitors that see only these, whose writes meet `script`.
pub(super) struct JanitorWorld {
    /// The backend's state store, unscripted, for looking.
    pub(super) store: Arc<dyn StateStore>,
    /// What the janitors write through.
    pub(super) script: Arc<Layered<Scripted>>,
    pub(super) janitor_objects: Arc<dyn ObjectStore>,
    pub(super) clock: Arc<ManualClock>,
    pub(super) scope: Arc<Scope>,
    pub(super) topic: String,
    pub(super) t0: i64,
}

impl JanitorWorld {
    pub(super) async fn new(backend: &dyn Backend, prefix: &str, retention_ms: Option<i64>) -> Self {
        let t0 = SystemClock.now_ms();
        let clock = Arc::new(ManualClock::new(t0));
        let (store, janitor_objects) = backend.open_with(clock.clone()).await;
        let topic = unique_topic(prefix);
        let scope = Arc::new(Scope { tag: unique_topic("scope"), ..Scope::default() });
        let world = Self {
            store: store.clone(),
            script: Scripted::new(store),
            janitor_objects: ScopedObjects::over(janitor_objects, &scope),
            clock,
            scope,
            topic,
            t0,
        };
        let spec = TopicSpec { partitions: 1, retention_ms, retention_bytes: None };
        let (config, _) = world.log(backend).await.create_topic(&world.topic, spec).await.unwrap();
        world.scope.topics.lock().unwrap().insert(world.topic.clone());
        world.scope.ids.lock().unwrap().insert(sluice_core::keys::purge_key(config.id).sk);
        world
    }

    /// A log of a process of its own (on the embedded backend, blobs in a file of its own),
    /// whose objects are in scope.
    pub(super) async fn log(&self, backend: &dyn Backend) -> Log {
        let (store, objects) = backend.open_with(self.clock.clone()).await;
        let objects = ScopedObjects::over(objects, &self.scope);
        Log::new(store, objects, self.clock.clone(), crate::blobs_only())
    }

    /// A janitor that sees only this world, its writes meeting `script`'s rules.
    pub(super) fn janitor(&self, config: JanitorConfig) -> Janitor {
        let store = Arc::new(Layered::new(self.script.clone(), ScopedStore { scope: self.scope.clone() }));
        Janitor::new(store, self.janitor_objects.clone(), self.clock.clone(), config)
    }

    pub(super) async fn index_items(&self) -> usize {
        let id = self.id().await;
        self.store.query(&Query::all(sluice_core::keys::segments_pk(id, 0), 1000)).await.unwrap().items.len()
    }

    pub(super) async fn id(&self) -> u64 {
        let item = self.store.get(&sluice_core::keys::topic_key(&self.topic)).await.unwrap().expect("the topic");
        layout::decode::<layout::TopicRecord>("topic", &item.value).unwrap().id
    }

    /// Every object of this world still stored holds live segments (its record counts some):
    /// the collector left no garbage it had freed, and took nothing live (replay says that).
    pub(super) async fn assert_every_object_live(&self) {
        let listed = self.janitor_objects.list(None, 1000).await.unwrap();
        for info in listed {
            let item = self.store.get(&sluice_core::keys::object_key(&info.name)).await.unwrap();
            let record = item.map(|i| layout::decode::<ObjectRecord>("object", &i.value).unwrap());
            assert!(record.is_some_and(|r| r.refs > 0 && !r.doomed), "{} is left: {record:?}", info.name);
        }
    }

    /// Objects of this world on the collector's free list.
    pub(super) async fn freed(&self) -> Vec<String> {
        let mine = self.scope.objects.lock().unwrap().clone();
        let mut freed = Vec::new();
        for shard in 0..sluice_core::keys::FREE_SHARDS {
            let page = self.store.query(&Query::all(sluice_core::keys::free_pk(shard), 1000)).await.unwrap();
            freed.extend(page.items.into_iter().map(|i| i.key.sk).filter(|o| mine.contains(o)));
        }
        freed
    }
}
