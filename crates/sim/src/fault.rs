//! The fault layer: wraps a process's view of both stores and, driven by one seeded
//! generator shared by every call of the simulation, fails calls before they apply, loses
//! answers after they applied, throttles, tears queries the way a non-snapshot read can,
//! fails object reads, and yields to the scheduler before and after each call so that
//! concurrent calls interleave differently. A process that crashed ([`Life::kill`]) gets
//! nothing through any more: every call of its tasks fails, and a write in flight at the
//! crash may or may not have applied. Transactions follow DynamoDB's conflict rule
//! (`conflict.rs`): while one is in flight, a write naming one of its items is refused.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::ports::objects::ObjectInfo;
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{BlobRef, ObjectStore, StorageError};
use sluice_testkit::{ObjectLayer, StateLayer};

use crate::rng::Rng;
use crate::trace::Trace;

mod conflict;

use conflict::{Hold, Holds, Shape};

/// Fault probabilities (per call) and the most yields around a call.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultConfig {
    pub enabled: bool,
    /// A call refused before it applied: `Unavailable`.
    pub fail_before: f64,
    /// A call refused before it applied: `Throttled` (DynamoDB's throttling and transaction conflicts).
    pub throttle: f64,
    /// A write (or delete, or put of an object) applied, and its answer lost: `Unavailable`.
    pub lost_answer: f64,
    /// A query read item by item, yielding between items, so concurrent writes land in the middle.
    pub torn_query: f64,
    /// An object read failing (`Unavailable`).
    pub object_read: f64,
    /// Yields before and after each call: 0..=max_yields, drawn per call.
    pub max_yields: u32,
}

/// Every kind of fault the simulation injects, counted as it fires ([`Chaos::fired`]): a
/// test holds that each fires over a fixed seed range, so that none goes quiet unnoticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// A state-store call refused before it applied (`Unavailable`).
    StateRefused,
    /// A state-store call throttled before it applied.
    StateThrottled,
    /// A state-store write (or delete) applied, its answer lost.
    StateAnswerLost,
    /// A query read item by item while writes land between.
    TornQuery,
    /// An object put, list or delete refused before it applied.
    ObjectRefused,
    /// An object read failing.
    ObjectReadFailed,
    /// An object put or delete applied, its answer lost.
    ObjectAnswerLost,
    /// A process killed, its calls in flight cut off.
    Crash,
    /// Every process killed at once, the store keeping only its durable writes.
    PowerCut,
    /// A power cut that undid deferred writes (some were at risk and lost).
    PowerCutLosingWrites,
    /// An answer lost on its way back to the client, the operation applied.
    ClientAnswerLost,
    /// A transaction cancelled: another in flight held one of its items (`Throttled`).
    TransactionConflict,
    /// A single-item write refused: a transaction in flight held its item (`Throttled`).
    WriteConflict,
}

impl Fault {
    pub const ALL: [Fault; 13] = [
        Fault::StateRefused,
        Fault::StateThrottled,
        Fault::StateAnswerLost,
        Fault::TornQuery,
        Fault::ObjectRefused,
        Fault::ObjectReadFailed,
        Fault::ObjectAnswerLost,
        Fault::Crash,
        Fault::PowerCut,
        Fault::PowerCutLosingWrites,
        Fault::ClientAnswerLost,
        Fault::TransactionConflict,
        Fault::WriteConflict,
    ];

    /// Its name in a seed's stats (`Outcome::stats`).
    pub fn name(self) -> &'static str {
        match self {
            Fault::StateRefused => "fault_state_refused",
            Fault::StateThrottled => "fault_state_throttled",
            Fault::StateAnswerLost => "fault_state_answer_lost",
            Fault::TornQuery => "fault_torn_query",
            Fault::ObjectRefused => "fault_object_refused",
            Fault::ObjectReadFailed => "fault_object_read_failed",
            Fault::ObjectAnswerLost => "fault_object_answer_lost",
            Fault::Crash => "crashes",
            Fault::PowerCut => "power_cuts",
            Fault::PowerCutLosingWrites => "power_cuts_losing_writes",
            Fault::ClientAnswerLost => "answers_lost",
            Fault::TransactionConflict => "fault_transaction_conflict",
            Fault::WriteConflict => "fault_write_conflict",
        }
    }
}

/// The faults of one simulation, and the generator that decides them.
pub struct Chaos {
    rng: Mutex<Rng>,
    config: Mutex<FaultConfig>,
    trace: Trace,
    verbose: AtomicBool,
    fired: Mutex<BTreeMap<Fault, u64>>,
    holds: Arc<Holds>,
}

impl Chaos {
    pub fn new(seed: u64, config: FaultConfig, trace: Trace) -> Self {
        Self {
            rng: Mutex::new(Rng::new(seed)),
            config: Mutex::new(config),
            trace,
            verbose: AtomicBool::new(false),
            fired: Mutex::default(),
            holds: Arc::default(),
        }
    }

    /// Counts a fault that fired (those the world injects itself: crashes, power cuts, lost answers).
    pub fn record(&self, fault: Fault) {
        *self.fired.lock().unwrap().entry(fault).or_insert(0) += 1;
    }

    /// How often each fault fired so far.
    pub fn fired(&self) -> BTreeMap<Fault, u64> {
        self.fired.lock().unwrap().clone()
    }

    pub fn config(&self) -> FaultConfig {
        *self.config.lock().unwrap()
    }

    /// Every call is traced (to find where two runs part).
    pub fn verbose(&self) -> bool {
        self.verbose.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set_verbose(&self, on: bool) {
        self.verbose.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn set_enabled(&self, enabled: bool) {
        self.config.lock().unwrap().enabled = enabled;
    }

    /// Whether `fault` fires now, with probability `p`; counted if it does.
    fn fires(&self, fault: Fault, p: f64) -> bool {
        let config = self.config();
        let fires = config.enabled && p > 0.0 && self.rng.lock().unwrap().chance(p);
        if fires {
            self.record(fault);
        }
        fires
    }

    fn yields(&self) -> u32 {
        let config = self.config();
        if config.max_yields == 0 {
            return 0;
        }
        self.rng.lock().unwrap().below(u64::from(config.max_yields) + 1) as u32
    }

    async fn pause(&self) {
        for _ in 0..self.yields() {
            tokio::task::yield_now().await;
        }
    }
}

/// One process's life: when it crashes, every call of its tasks fails from then on.
pub struct Life {
    pub pid: usize,
    pub incarnation: u64,
    dead: AtomicBool,
}

impl Life {
    pub fn new(pid: usize, incarnation: u64) -> Arc<Self> {
        Arc::new(Self { pid, incarnation, dead: AtomicBool::new(false) })
    }

    pub fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    pub fn dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }
}

fn unavailable(what: &str) -> StorageError {
    StorageError::Unavailable { message: format!("sim: {what}"), source: None }
}

fn throttled(what: &str) -> StorageError {
    StorageError::Throttled { message: format!("sim: {what}"), source: None }
}

fn keys_of(ops: &[WriteOp]) -> String {
    let mut s = String::new();
    for (i, op) in ops.iter().take(4).enumerate() {
        if i > 0 {
            s.push(',');
        }
        let k = op.key();
        s.push_str(&k.pk);
        s.push('/');
        s.push_str(&k.sk);
    }
    if ops.len() > 4 {
        s.push_str(&format!(",+{}", ops.len() - 4));
    }
    s
}

/// A process's faults on the state store: the shared one behind them is a
/// [`sluice_testkit::Layered`] of this.
pub struct FaultyStore {
    chaos: Arc<Chaos>,
    life: Arc<Life>,
}

impl FaultyStore {
    pub fn new(chaos: Arc<Chaos>, life: Arc<Life>) -> Self {
        Self { chaos, life }
    }

    /// A write (`deferred`: [`StateStore::write_deferred`]) with this process's faults: a
    /// crash before or after it applies, or its answer lost.
    async fn write_faulty(
        &self,
        inner: &dyn StateStore,
        ops: Vec<WriteOp>,
        deferred: bool,
    ) -> Result<(), StorageError> {
        sluice_core::ports::state::validate(&ops)?;
        if self.chaos.verbose() {
            let detail: Vec<String> = ops
                .iter()
                .map(|op| {
                    let k = op.key();
                    let kind = match op {
                        WriteOp::Put { .. } => "put",
                        WriteOp::Delete { .. } => "del",
                        WriteOp::Check { .. } => "chk",
                    };
                    format!("{kind} {}/{} {:?}", k.pk, k.sk, op.expect())
                })
                .collect();
            self.note(&format!("write ops [{}]", detail.join(", ")));
        }
        let shape = Shape::of(&ops);
        // Held from here to the end of the call, across the yields around it.
        let hold = self.arrive(&shape).await?;
        self.before("write").await?;
        if hold.is_some() {
            // In flight across one yield at least, so that other calls meet it.
            tokio::task::yield_now().await;
        }
        if let Shape::Single(key) = &shape {
            // Checked with no yield before it applies: DynamoDB checks and applies at once.
            self.refuse_if_held(key)?;
        }
        let keys = keys_of(&ops);
        let out = if deferred { inner.write_deferred(ops).await } else { inner.write(ops).await };
        if self.chaos.verbose() {
            self.note(&format!("write applied? {:?} [{keys}]", out.as_ref().map_err(|e| e.to_string())));
        }
        if out.is_ok() && self.chaos.fires(Fault::StateAnswerLost, self.chaos.config().lost_answer) {
            self.note(&format!("lost the answer of an applied write [{keys}]"));
            self.chaos.pause().await;
            return Err(unavailable("answer lost after the write applied"));
        }
        if let Err(e) = self.after().await {
            if out.is_ok() {
                self.note(&format!("crashed after an applied write [{keys}]"));
            }
            return Err(e);
        }
        out
    }

    /// A transaction arriving, under DynamoDB's conflict rule: cancelled (its answer after a
    /// pause, as a refused request still takes its latency) if another in flight holds one of
    /// its items; otherwise it holds them all until the returned hold is dropped.
    async fn arrive(&self, shape: &Shape) -> Result<Option<Hold>, StorageError> {
        let Shape::Transaction(keys) = shape else { return Ok(None) };
        // A dead process's write never reaches the store (`before` refuses it).
        if !self.chaos.config().enabled || self.life.dead() {
            return Ok(None);
        }
        match self.chaos.holds.take(keys) {
            Ok(hold) => Ok(Some(hold)),
            Err(key) => {
                self.chaos.record(Fault::TransactionConflict);
                self.note(&format!("transaction cancelled: {}/{} held by another", key.pk, key.sk));
                self.chaos.pause().await;
                Err(throttled("transaction conflict"))
            }
        }
    }

    /// A single-item write refused if a transaction in flight holds its item.
    fn refuse_if_held(&self, key: &Key) -> Result<(), StorageError> {
        if !self.chaos.config().enabled || !self.chaos.holds.held(key) {
            return Ok(());
        }
        self.chaos.record(Fault::WriteConflict);
        self.note(&format!("write refused: {}/{} held by a transaction", key.pk, key.sk));
        Err(throttled("write conflicts with a transaction in flight"))
    }

    fn note(&self, what: &str) {
        self.chaos.trace.line(format!("  fault p{}.{} {what}", self.life.pid, self.life.incarnation));
    }

    /// Before a call: yields, then the crash and refusal checks.
    async fn before(&self, what: &str) -> Result<(), StorageError> {
        if self.chaos.verbose() {
            self.note(&format!("call {what}"));
        }
        self.chaos.pause().await;
        if self.life.dead() {
            return Err(unavailable("process crashed"));
        }
        let c = self.chaos.config();
        if self.chaos.fires(Fault::StateThrottled, c.throttle) {
            self.note(&format!("throttled {what}"));
            return Err(throttled(what));
        }
        if self.chaos.fires(Fault::StateRefused, c.fail_before) {
            self.note(&format!("failed before {what}"));
            return Err(unavailable(what));
        }
        Ok(())
    }

    /// After a call applied: yields, then the crash check.
    async fn after(&self) -> Result<(), StorageError> {
        self.chaos.pause().await;
        if self.life.dead() {
            return Err(unavailable("process crashed after the call applied"));
        }
        Ok(())
    }

    /// A query read item by item, each at its own moment: what DynamoDB's non-snapshot
    /// queries can show (an item a concurrent transaction deletes and another it creates
    /// seen as neither or both, in scan order).
    async fn torn_query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        let limit = query.limit.max(1);
        let mut q = query.clone();
        q.limit = 1;
        let mut items: Vec<Item> = Vec::new();
        loop {
            let page = inner.query(&q).await?;
            let more = page.next.is_some();
            if let Some(item) = page.items.into_iter().next() {
                q.after = Some(item.key.sk.clone());
                items.push(item);
            } else {
                return Ok(Page { items, next: None });
            }
            if items.len() >= limit {
                // Whether more follow is itself read at a later moment.
                return Ok(Page { next: if more { q.after.clone() } else { None }, items });
            }
            if !more {
                return Ok(Page { items, next: None });
            }
            for _ in 0..1 + self.chaos.yields() {
                tokio::task::yield_now().await;
            }
            if self.life.dead() {
                return Err(unavailable("process crashed mid-query"));
            }
        }
    }
}

#[async_trait]
impl StateLayer for FaultyStore {
    async fn get(&self, inner: &dyn StateStore, key: &Key) -> Result<Option<Item>, StorageError> {
        self.before("get").await?;
        let out = inner.get(key).await;
        self.after().await?;
        out
    }

    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        self.before("query").await?;
        let c = self.chaos.config();
        let out = if query.limit > 1 && self.chaos.fires(Fault::TornQuery, c.torn_query) {
            self.torn_query(inner, query).await
        } else {
            inner.query(query).await
        };
        self.after().await?;
        out
    }

    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write_faulty(inner, ops, false).await
    }

    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write_faulty(inner, ops, true).await
    }

    async fn delete_many(&self, inner: &dyn StateStore, keys: Vec<Key>) -> Result<(), StorageError> {
        self.before("delete_many").await?;
        // Not atomic as a whole: each delete on its own, a crash or a lost answer part way.
        for chunk in keys.chunks(8) {
            inner.delete_many(chunk.to_vec()).await?;
            self.chaos.pause().await;
            if self.life.dead() {
                return Err(unavailable("process crashed during delete_many"));
            }
        }
        if self.chaos.fires(Fault::StateAnswerLost, self.chaos.config().lost_answer) {
            self.note("lost the answer of delete_many");
            return Err(unavailable("answer of delete_many lost"));
        }
        Ok(())
    }

    async fn purge_expired(&self, inner: &dyn StateStore, limit: usize) -> Result<usize, StorageError> {
        self.before("purge_expired").await?;
        let out = inner.purge_expired(limit).await;
        self.after().await?;
        out
    }
}

/// A process's faults on the object store: the shared one behind them is a
/// [`sluice_testkit::LayeredObjects`] of this.
pub struct FaultyObjects {
    chaos: Arc<Chaos>,
    life: Arc<Life>,
}

impl FaultyObjects {
    pub fn new(chaos: Arc<Chaos>, life: Arc<Life>) -> Self {
        Self { chaos, life }
    }

    fn note(&self, what: &str) {
        self.chaos.trace.line(format!("  fault p{}.{} {what}", self.life.pid, self.life.incarnation));
    }

    async fn before(&self, what: &str, fault: Fault, p: f64) -> Result<(), StorageError> {
        self.chaos.pause().await;
        if self.life.dead() {
            return Err(unavailable("process crashed"));
        }
        if self.chaos.fires(fault, p) {
            self.note(&format!("failed object {what}"));
            return Err(unavailable(what));
        }
        Ok(())
    }

    async fn after(&self) -> Result<(), StorageError> {
        self.chaos.pause().await;
        if self.life.dead() {
            return Err(unavailable("process crashed after the call"));
        }
        Ok(())
    }
}

#[async_trait]
impl ObjectLayer for FaultyObjects {
    async fn put(&self, inner: &dyn ObjectStore, bytes: Bytes) -> Result<BlobRef, StorageError> {
        let c = self.chaos.config();
        self.before("put", Fault::ObjectRefused, c.fail_before).await?;
        let out = inner.put(bytes).await;
        if out.is_ok() && self.chaos.fires(Fault::ObjectAnswerLost, c.lost_answer) {
            self.note("lost the answer of an object put");
            return Err(unavailable("answer of an object put lost"));
        }
        self.after().await?;
        out
    }

    async fn read(
        &self,
        inner: &dyn ObjectStore,
        object: &str,
        position: u64,
        len: u64,
    ) -> Result<Bytes, StorageError> {
        let c = self.chaos.config();
        self.before("read", Fault::ObjectReadFailed, c.object_read).await?;
        let out = inner.read(object, position, len).await;
        self.after().await?;
        out
    }

    async fn list(
        &self,
        inner: &dyn ObjectStore,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ObjectInfo>, StorageError> {
        let c = self.chaos.config();
        self.before("list", Fault::ObjectRefused, c.fail_before).await?;
        let out = inner.list(after, limit).await;
        self.after().await?;
        out
    }

    async fn delete(&self, inner: &dyn ObjectStore, object: &str) -> Result<(), StorageError> {
        let c = self.chaos.config();
        self.before("delete", Fault::ObjectRefused, c.fail_before).await?;
        let out = inner.delete(object).await;
        if out.is_ok() && self.chaos.fires(Fault::ObjectAnswerLost, c.lost_answer) {
            self.note("lost the answer of an object delete");
            return Err(unavailable("answer of an object delete lost"));
        }
        self.after().await?;
        out
    }
}
