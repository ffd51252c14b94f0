//! One storage conformance suite, written once and run against every backend
//! (object_store's `integration.rs` pattern): the embedded and in-memory backends on every
//! run, the AWS adapters against moto's server (`tests/embedded.rs`, `tests/memory.rs`,
//! `tests/moto.rs`: each invokes the suites' macros on its [`Backend`]).
//!
//! Each case uses keys and topics of its own (random names), so cases can share
//! one moto server or one data directory and run in parallel.

pub mod billed;
pub mod cases;
pub mod disk;
pub mod embedded;
pub mod http_faults;
pub mod memory;
pub mod moto;
pub mod objects;
pub mod store;
pub mod watch;

use std::sync::Arc;

use async_trait::async_trait;
use sluice_core::ports::state::{Key, Page, Query, StateStore, WriteOp};
use sluice_core::{Clock, ObjectStore, StorageError};
use sluice_testkit::{Layered, StateLayer};

/// The two stores of one backend.
pub type Stores = (Arc<dyn StateStore>, Arc<dyn ObjectStore>);

/// A backend under test.
#[async_trait]
pub trait Backend: Send + Sync {
    /// A new handle on the same storage, as another process would open it
    /// (its own clients and caches), reading time from `clock`.
    async fn open_with(&self, clock: Arc<dyn Clock>) -> Stores;

    /// How many index items the bulk cases write (fewer on an emulator, to keep CI quick).
    fn large_count(&self) -> usize {
        100_000
    }

    /// Whether the queue cases' queues cache subscriptions, as a process on this backend
    /// does (`serve`, on the embedded backend) or not (the functions, on AWS).
    fn caches_subscriptions(&self) -> bool {
        false
    }

    /// [`Backend::open_with`] the system clock.
    async fn open(&self) -> Stores {
        self.open_with(Arc::new(sluice_core::SystemClock)).await
    }
}

/// Whether this test binary's backend keeps every segment in a blob (set by the moto backend,
/// so that its cases run the log as the AWS functions do; see [`log_config`]).
static INLINE_BYTES: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(sluice_core::DEFAULT_INLINE_SEGMENT_BYTES);

/// Makes [`log_config`] keep segments inline up to `bytes` for the rest of this test binary,
/// so that a backend's cases run as its processes do.
pub fn segments_inline_up_to(bytes: usize) {
    INLINE_BYTES.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this test binary's backend commits small single-partition publishes with one write
/// of the head (set by the moto and in-memory backends; see [`log_config`]).
static SINGLE_WRITE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes [`log_config`] commit as the AWS functions do (`LogConfig::single_write_commits`)
/// for the rest of this test binary.
pub fn commits_in_one_write() {
    SINGLE_WRITE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The log's configuration for a case: the default, with this binary's backend's bound on
/// inline segments ([`segments_inline_up_to`]; embedded's default unless told) and its way
/// of committing ([`commits_in_one_write`]; embedded's transaction unless told).
pub fn log_config() -> sluice_core::LogConfig {
    let inline_segment_bytes = INLINE_BYTES.load(std::sync::atomic::Ordering::Relaxed);
    let single_write_commits = SINGLE_WRITE.load(std::sync::atomic::Ordering::Relaxed);
    sluice_core::LogConfig { inline_segment_bytes, single_write_commits, ..sluice_core::LogConfig::default() }
}

/// Whether a write is a commit's: it moves a partition's head from the version read, whether
/// in a transaction with the segment's index item or alone (the head carrying the entry).
pub fn is_commit(ops: &[sluice_core::ports::state::WriteOp]) -> bool {
    use sluice_core::ports::state::{Expect, WriteOp};
    ops.iter().any(|op| {
        matches!(op, WriteOp::Put { key, expect: Expect::Version(_), .. } if sluice_core::keys::topic_of_heads_pk(&key.pk).is_some())
    })
}

/// The log's configuration with every segment in a blob, never inline: for cases about
/// objects (their counts, their collection, a lost PUT).
pub fn blobs_only() -> sluice_core::LogConfig {
    sluice_core::LogConfig { inline_segment_bytes: 0, ..sluice_core::LogConfig::default() }
}

/// A name no other case uses.
pub fn unique_topic(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

/// A state-store layer through which a janitor ([`sluice_core::upkeep::step`]) sees only
/// the purge orders of the topics and subscriptions given (every other item as it is), and
/// which counts the items deleted through it.
///
/// A janitor works on every purge order of its table, and cases on one moto server share it:
/// two cases' janitors on the same order race (the loser's step fails with a lost condition),
/// and one case's janitor does another's work, so a case cannot count the steps or the
/// purges its own janitor took. Through this view a case's janitor touches its own orders
/// only; another case's janitor may still work on them (it sees them all), so a case still
/// takes a failed condition for a lost race, as DESIGN.md says two janitors may meet.
pub struct OwnPurges {
    orders: Vec<Key>,
    deleted: std::sync::atomic::AtomicUsize,
}

impl OwnPurges {
    /// The view of `inner` whose purge orders are those of the topics `topics` and the
    /// subscriptions `subscriptions` (by id).
    pub fn new(inner: Arc<dyn StateStore>, topics: &[u64], subscriptions: &[u64]) -> Layered<Self> {
        let mut orders: Vec<_> = topics.iter().map(|&id| sluice_core::keys::purge_key(id)).collect();
        orders.extend(subscriptions.iter().map(|id| sluice_core::keys::sub_purge_key(*id)));
        Layered::new(inner, Self { orders, deleted: Default::default() })
    }

    /// Items deleted through this view so far.
    pub fn deleted(&self) -> usize {
        self.deleted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl StateLayer for OwnPurges {
    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        if query.pk != sluice_core::keys::purge_pk() && query.pk != sluice_core::keys::sub_purge_pk() {
            return inner.query(query).await;
        }
        // The orders of this view that exist, in key order (a janitor asks for them from the start).
        assert!(
            query.from.is_none() && query.to.is_none() && query.forward,
            "an order query as janitors ask: {query:?}"
        );
        let mut items = Vec::new();
        for key in self.orders.iter().filter(|k| k.pk == query.pk) {
            if query.after.as_ref().is_some_and(|after| key.sk <= *after) {
                continue;
            }
            if let Some(item) = inner.get(key).await? {
                items.push(item);
            }
        }
        items.sort_by(|a, b| a.key.sk.cmp(&b.key.sk));
        let next = (items.len() > query.limit).then(|| items[query.limit - 1].key.sk.clone());
        items.truncate(query.limit);
        Ok(Page { items, next })
    }

    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let deletes = ops.iter().filter(|op| matches!(op, WriteOp::Delete { .. })).count();
        inner.write(ops).await?;
        self.deleted.fetch_add(deletes, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// As a write (the port's default for a store without the distinction), counted as one.
    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write(inner, ops).await
    }

    async fn delete_many(&self, inner: &dyn StateStore, keys: Vec<Key>) -> Result<(), StorageError> {
        let n = keys.len();
        inner.delete_many(keys).await?;
        self.deleted.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// One step of [`sluice_core::upkeep::step`] through `store`, taking a lost condition
/// for what it is on a shared backend, a race with another case's janitor on the same order
/// (the loser changes nothing; the next step goes on): `None` then.
pub async fn janitor_step(
    store: &dyn StateStore,
    budget: usize,
    now_ms: i64,
) -> Option<sluice_core::upkeep::JanitorReport> {
    match sluice_core::upkeep::step(store, budget, now_ms).await {
        Ok(report) => Some(report),
        Err(StorageError::ConditionFailed { .. }) => None,
        Err(e) => panic!("janitor step: {e:?}"),
    }
}
