//! The conformance suites' one fault kit per port, as [`sluice_testkit`] layers.
//! [`Scripted`] makes a state store meet scripted events at chosen writes and queries: a
//! fault (the answer lost after the write applied, a failure before it, throttling, a query
//! torn by a concurrent write), a rival's work run just before or just after the call, or a [`Gate`] that holds writes, so a case
//! can place an interleaving exactly where it matters; reads (`get`) can be made to fail;
//! it also counts queries and the writes a case asks about. [`ScriptedObjects`] does the same to an object store: faults at puts,
//! a rival's work after a listing, and counts of reads and puts.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::ports::objects::ObjectInfo;
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{BlobRef, ObjectStore, StorageError};
use sluice_testkit::{Layered, LayeredObjects, ObjectLayer, StateLayer};
use tokio::sync::Notify;

/// What an injected fault does to the next commit write (a write that indexes a segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The write is applied, then its answer is lost.
    LoseAnswer,
    /// The write is not applied and its answer is lost.
    FailBefore,
    /// The store refuses it before doing anything (throttling, a transaction conflict).
    Throttle,
}

/// A state-store layer whose queue writes (those touching a queue collection) meet a script
/// of faults in order, `None` passing one; other writes, and queue writes past the script,
/// pass untouched. A deferred write (an ack's) meets the script as any write.
#[derive(Default)]
pub struct QueueWriteFaults {
    script: Mutex<std::collections::VecDeque<Option<Fault>>>,
}

impl QueueWriteFaults {
    pub fn new(script: &[Option<Fault>]) -> Self {
        Self { script: Mutex::new(script.iter().copied().collect()) }
    }

    /// Adds `fault` to the end of the script.
    pub fn then(&self, fault: Fault) {
        self.script.lock().unwrap().push_back(Some(fault));
    }
}

#[async_trait]
impl StateLayer for QueueWriteFaults {
    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let queue_write = ops.iter().any(|op| op.key().pk.starts_with(sluice_core::keys::QUEUE_PREFIX));
        let fault = if queue_write { self.script.lock().unwrap().pop_front().flatten() } else { None };
        match fault {
            None => inner.write(ops).await,
            Some(Fault::LoseAnswer) => {
                inner.write(ops).await?;
                Err(lost())
            }
            Some(Fault::FailBefore) => Err(lost()),
            Some(Fault::Throttle) => Err(StorageError::Throttled { message: "injected".into(), source: None }),
        }
    }

    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.write(inner, ops).await
    }
}

/// Work a rule runs beside the write it matched.
pub type Rival = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Which writes a rule meets.
pub type Matcher = Box<dyn Fn(&[WriteOp]) -> bool + Send + Sync>;

/// What happens at the write a rule meets.
pub enum Action {
    /// The fault, to this write.
    Fault(Fault),
    /// The rival runs to its end, then the write goes on (and may fail its conditions).
    Before(Rival),
    /// The write applies, then the rival runs to its end before the write answers.
    After(Rival),
    /// The write applies, the rival runs to its end, then the write's answer is lost
    /// (`Unavailable`): a rival's work landing between a lost answer and its resolution.
    LoseAnswerAfter(Rival),
    /// The write is not applied, the rival runs to its end, then the write answers
    /// `Unavailable`: a rival's work landing between a failed attempt and its retry.
    FailAfter(Rival),
    /// The rival runs to its end, then the write applies and its answer is lost: a write
    /// landing after a rival's work, its sender none the wiser.
    LoseAnswerBefore(Rival),
}

/// What happens at the query a query rule meets.
pub enum QueryAction {
    /// The answer misses its first `n` items, as a query racing a transaction can.
    Tear(usize),
    /// The answer misses the segment index items at these offsets (a query torn by a
    /// compaction's swap), at the query of the collection after `skip` others of it.
    Hide { offsets: Range<u64>, skip: usize },
    /// The answer misses the items whose sort keys start with this, as a query that sees
    /// one item a transaction wrote and not yet another can.
    Miss(&'static str),
    /// The rival runs to its end, then the query reads.
    Before(Rival),
}

/// A state-store layer whose rules each meet the first write (or query) they match, once, in
/// order of adding.
pub struct Scripted {
    rules: Mutex<Vec<(Matcher, Action)>>,
    query_rules: Mutex<Vec<(String, QueryAction)>>,
    counters: Mutex<Vec<(Matcher, Arc<AtomicUsize>)>>,
    queries: AtomicUsize,
    /// Writes made with `write_deferred` (scripted as any write, then applied durably).
    deferred: AtomicUsize,
    gate: Mutex<Option<Arc<Gate>>>,
    /// Reads (`get`) still to fail `Unavailable`.
    failing_gets: AtomicUsize,
}

impl Scripted {
    /// `inner`, scripted (with no rules yet).
    pub fn new(inner: Arc<dyn StateStore>) -> Arc<Layered<Self>> {
        let script = Self {
            rules: Mutex::new(Vec::new()),
            query_rules: Mutex::new(Vec::new()),
            counters: Mutex::new(Vec::new()),
            queries: AtomicUsize::new(0),
            deferred: AtomicUsize::new(0),
            gate: Mutex::new(None),
            failing_gets: AtomicUsize::new(0),
        };
        Arc::new(Layered::new(inner, script))
    }

    /// Counts, from now on, the writes `matches` accepts (those met by a rule included).
    pub fn count(&self, matches: impl Fn(&[WriteOp]) -> bool + Send + Sync + 'static) -> Arc<AtomicUsize> {
        let counter = Arc::new(AtomicUsize::new(0));
        self.counters.lock().unwrap().push((Box::new(matches), counter.clone()));
        counter
    }

    /// Queries made through this store so far.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }

    /// Writes made through this store's `write_deferred` so far.
    pub fn deferred(&self) -> usize {
        self.deferred.load(Ordering::SeqCst)
    }

    /// Every write waits at `gate` while it is closed.
    pub fn gate(&self, gate: Arc<Gate>) {
        *self.gate.lock().unwrap() = Some(gate);
    }

    /// Adds a rule that meets the next write `matches` accepts.
    pub fn at(&self, matches: impl Fn(&[WriteOp]) -> bool + Send + Sync + 'static, action: Action) {
        self.rules.lock().unwrap().push((Box::new(matches), action));
    }

    /// Adds a rule that meets the next query of a collection whose key starts with `pk_prefix`.
    pub fn at_query(&self, pk_prefix: impl Into<String>, action: QueryAction) {
        self.query_rules.lock().unwrap().push((pk_prefix.into(), action));
    }

    /// The next `n` reads (`get`) fail `Unavailable`, as when storage goes down.
    pub fn fail_gets(&self, n: usize) {
        self.failing_gets.store(n, Ordering::SeqCst);
    }

    /// Rules (of writes and queries) not met yet.
    pub fn pending(&self) -> usize {
        self.rules.lock().unwrap().len() + self.query_rules.lock().unwrap().len()
    }
}

/// A write that puts an item whose sort key starts with `prefix`.
pub fn puts(prefix: &'static str) -> impl Fn(&[WriteOp]) -> bool + Send + Sync {
    move |ops| ops.iter().any(|op| matches!(op, WriteOp::Put { key, .. } if key.sk.starts_with(prefix)))
}

/// A write that deletes an item whose sort key starts with `prefix`.
pub fn deletes(prefix: &'static str) -> impl Fn(&[WriteOp]) -> bool + Send + Sync {
    move |ops| ops.iter().any(|op| matches!(op, WriteOp::Delete { key, .. } if key.sk.starts_with(prefix)))
}

/// Whether `ops` puts an item whose key starts with `pk` and `sk` (prefixes; "" for any).
pub fn puts_at(ops: &[WriteOp], pk: &str, sk: &str) -> bool {
    ops.iter().any(|op| matches!(op, WriteOp::Put { key, .. } if key.pk.starts_with(pk) && key.sk.starts_with(sk)))
}

/// Whether `ops` deletes an item whose key starts with `pk` and `sk` (prefixes; "" for any).
pub fn deletes_at(ops: &[WriteOp], pk: &str, sk: &str) -> bool {
    ops.iter().any(|op| matches!(op, WriteOp::Delete { key, .. } if key.pk.starts_with(pk) && key.sk.starts_with(sk)))
}

/// Whether `ops` puts an item whose key starts with `pk` and whose value holds `needle`.
pub fn puts_value(ops: &[WriteOp], pk: &str, needle: &[u8]) -> bool {
    ops.iter().any(|op| {
        matches!(op, WriteOp::Put { key, value, .. }
            if key.pk.starts_with(pk) && value.windows(needle.len()).any(|w| w == needle))
    })
}

fn lost() -> StorageError {
    StorageError::Unavailable { message: "injected: answer lost".into(), source: None }
}

#[async_trait]
impl StateLayer for Scripted {
    async fn get(&self, inner: &dyn StateStore, key: &Key) -> Result<Option<Item>, StorageError> {
        if self.failing_gets.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(lost());
        }
        inner.get(key).await
    }

    async fn query(&self, inner: &dyn StateStore, query: &Query) -> Result<Page, StorageError> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        let action = {
            let mut rules = self.query_rules.lock().unwrap();
            let at = rules.iter().position(|(prefix, _)| query.pk.starts_with(prefix.as_str()));
            match at.map(|i| (i, &mut rules[i].1)) {
                // Not this one yet: the rule waits for a later query of its collection.
                Some((_, QueryAction::Hide { skip, .. })) if *skip > 0 => {
                    *skip -= 1;
                    None
                }
                Some((i, _)) => Some(rules.remove(i).1),
                None => None,
            }
        };
        match action {
            None => inner.query(query).await,
            Some(QueryAction::Tear(n)) => {
                let mut page = inner.query(query).await?;
                page.items.drain(..n.min(page.items.len()));
                Ok(page)
            }
            Some(QueryAction::Hide { offsets, .. }) => {
                let mut page = inner.query(query).await?;
                page.items.retain(|i| sluice_core::keys::offset_of(&i.key.sk).map_or(true, |o| !offsets.contains(&o)));
                Ok(page)
            }
            Some(QueryAction::Miss(prefix)) => {
                let mut page = inner.query(query).await?;
                page.items.retain(|i| !i.key.sk.starts_with(prefix));
                Ok(page)
            }
            Some(QueryAction::Before(rival)) => {
                rival.await;
                inner.query(query).await
            }
        }
    }

    async fn write(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let gate = self.gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            gate.pass().await;
        }
        for (matches, counter) in self.counters.lock().unwrap().iter() {
            if matches(&ops) {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }
        let action = {
            let mut rules = self.rules.lock().unwrap();
            rules.iter().position(|(m, _)| m(&ops)).map(|i| rules.remove(i).1)
        };
        match action {
            None => inner.write(ops).await,
            Some(Action::Fault(Fault::LoseAnswer)) => {
                inner.write(ops).await?;
                Err(lost())
            }
            Some(Action::Fault(Fault::FailBefore)) => Err(lost()),
            Some(Action::Fault(Fault::Throttle)) => {
                Err(StorageError::Throttled { message: "injected".into(), source: None })
            }
            Some(Action::Before(rival)) => {
                rival.await;
                inner.write(ops).await
            }
            Some(Action::After(rival)) => {
                let written = inner.write(ops).await;
                rival.await;
                written
            }
            Some(Action::LoseAnswerAfter(rival)) => {
                inner.write(ops).await?;
                rival.await;
                Err(lost())
            }
            Some(Action::FailAfter(rival)) => {
                rival.await;
                Err(lost())
            }
            Some(Action::LoseAnswerBefore(rival)) => {
                rival.await;
                inner.write(ops).await?;
                Err(lost())
            }
        }
    }

    async fn write_deferred(&self, inner: &dyn StateStore, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.deferred.fetch_add(1, Ordering::SeqCst);
        self.write(inner, ops).await
    }
}

/// An object-store layer whose next puts meet scripted faults (the blob is stored, then its
/// answer is lost ([`Fault::LoseAnswer`]), or the put fails before storing anything), whose
/// next listing can run a rival's work before it answers, and which counts reads and keeps
/// the refs its puts answered.
pub struct ScriptedObjects {
    faults: Mutex<std::collections::VecDeque<Fault>>,
    after_list: Mutex<Option<Rival>>,
    reads: AtomicUsize,
    read_bytes: AtomicUsize,
    puts: Mutex<Vec<BlobRef>>,
}

impl ScriptedObjects {
    /// `inner`, scripted (with no faults yet).
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<LayeredObjects<Self>> {
        let script = Self {
            faults: Mutex::new(std::collections::VecDeque::new()),
            after_list: Mutex::new(None),
            reads: AtomicUsize::new(0),
            read_bytes: AtomicUsize::new(0),
            puts: Mutex::new(Vec::new()),
        };
        Arc::new(LayeredObjects::new(inner, script))
    }

    /// The next listing runs `rival` to its end after it has read, before it answers.
    pub fn after_list(&self, rival: Rival) {
        *self.after_list.lock().unwrap() = Some(rival);
    }

    /// Reads made through this store so far.
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }

    /// Bytes those reads asked for.
    pub fn read_bytes(&self) -> usize {
        self.read_bytes.load(Ordering::SeqCst)
    }

    /// Where each put answered so far.
    pub fn puts(&self) -> Vec<BlobRef> {
        self.puts.lock().unwrap().clone()
    }

    /// The next put not yet scripted meets `fault`.
    pub fn at_put(&self, fault: Fault) {
        self.faults.lock().unwrap().push_back(fault);
    }

    /// Faults not met yet.
    pub fn pending(&self) -> usize {
        self.faults.lock().unwrap().len()
    }
}

#[async_trait]
impl ObjectLayer for ScriptedObjects {
    async fn put(&self, inner: &dyn ObjectStore, bytes: Bytes) -> Result<BlobRef, StorageError> {
        let fault = self.faults.lock().unwrap().pop_front();
        match fault {
            None => {
                let at = inner.put(bytes).await?;
                self.puts.lock().unwrap().push(at.clone());
                Ok(at)
            }
            Some(Fault::LoseAnswer) => {
                inner.put(bytes).await?;
                Err(lost())
            }
            Some(Fault::FailBefore) => Err(lost()),
            Some(Fault::Throttle) => Err(StorageError::Throttled { message: "injected".into(), source: None }),
        }
    }

    async fn read(
        &self,
        inner: &dyn ObjectStore,
        object: &str,
        position: u64,
        len: u64,
    ) -> Result<Bytes, StorageError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.read_bytes.fetch_add(usize::try_from(len).unwrap_or(usize::MAX), Ordering::SeqCst);
        inner.read(object, position, len).await
    }

    async fn list(
        &self,
        inner: &dyn ObjectStore,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ObjectInfo>, StorageError> {
        let listed = inner.list(after, limit).await?;
        let rival = self.after_list.lock().unwrap().take();
        if let Some(rival) = rival {
            rival.await;
        }
        Ok(listed)
    }
}

/// Holds writes while closed; tells when one is waiting.
#[derive(Default)]
pub struct Gate {
    closed: AtomicBool,
    blocked: AtomicUsize,
    opened: Notify,
    waiting: Notify,
}

impl Gate {
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    pub fn open(&self) {
        self.closed.store(false, Ordering::SeqCst);
        self.opened.notify_waiters();
    }

    /// Returns once a write waits at the gate.
    pub async fn wait_for_blocked(&self) {
        while self.blocked.load(Ordering::SeqCst) == 0 {
            self.waiting.notified().await;
        }
    }

    async fn pass(&self) {
        while self.closed.load(Ordering::SeqCst) {
            let opened = self.opened.notified();
            self.blocked.fetch_add(1, Ordering::SeqCst);
            self.waiting.notify_waiters();
            opened.await;
            self.blocked.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
