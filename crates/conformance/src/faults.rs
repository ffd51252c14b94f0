//! A state store that meets scripted events at chosen writes and queries: a fault (the
//! answer lost after the write applied, a failure before it, a query torn by a concurrent
//! write), or a rival's work run just before or just after the call, so a case can place
//! an interleaving exactly where it matters.
//! [`ScriptedObjects`] does the same to an object store's puts.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::ports::objects::ObjectInfo;
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{BlobRef, ObjectStore, StorageError};

use crate::log_cases::Fault;

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
}

/// What happens at the query a query rule meets.
pub enum QueryAction {
    /// The answer misses its first `n` items, as a query racing a transaction can.
    Tear(usize),
    /// The rival runs to its end, then the query reads.
    Before(Rival),
}

/// A [`StateStore`] whose rules each meet the first write (or query) they match, once, in
/// order of adding.
pub struct Scripted {
    inner: Arc<dyn StateStore>,
    rules: Mutex<Vec<(Matcher, Action)>>,
    query_rules: Mutex<Vec<(String, QueryAction)>>,
}

impl Scripted {
    pub fn new(inner: Arc<dyn StateStore>) -> Arc<Self> {
        Arc::new(Self { inner, rules: Mutex::new(Vec::new()), query_rules: Mutex::new(Vec::new()) })
    }

    /// Adds a rule that meets the next write `matches` accepts.
    pub fn at(&self, matches: impl Fn(&[WriteOp]) -> bool + Send + Sync + 'static, action: Action) {
        self.rules.lock().unwrap().push((Box::new(matches), action));
    }

    /// Adds a rule that meets the next query of a collection whose key starts with `pk_prefix`.
    pub fn at_query(&self, pk_prefix: impl Into<String>, action: QueryAction) {
        self.query_rules.lock().unwrap().push((pk_prefix.into(), action));
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
impl StateStore for Scripted {
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        self.inner.get(key).await
    }

    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        let action = {
            let mut rules = self.query_rules.lock().unwrap();
            rules.iter().position(|(prefix, _)| query.pk.starts_with(prefix.as_str())).map(|i| rules.remove(i).1)
        };
        match action {
            None => self.inner.query(query).await,
            Some(QueryAction::Tear(n)) => {
                let mut page = self.inner.query(query).await?;
                page.items.drain(..n.min(page.items.len()));
                Ok(page)
            }
            Some(QueryAction::Before(rival)) => {
                rival.await;
                self.inner.query(query).await
            }
        }
    }

    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        let action = {
            let mut rules = self.rules.lock().unwrap();
            rules.iter().position(|(m, _)| m(&ops)).map(|i| rules.remove(i).1)
        };
        match action {
            None => self.inner.write(ops).await,
            Some(Action::Fault(Fault::LoseAnswer)) => {
                self.inner.write(ops).await?;
                Err(lost())
            }
            Some(Action::Fault(Fault::FailBefore)) => Err(lost()),
            Some(Action::Fault(Fault::Throttle)) => {
                Err(StorageError::Throttled { message: "injected".into(), source: None })
            }
            Some(Action::Before(rival)) => {
                rival.await;
                self.inner.write(ops).await
            }
            Some(Action::After(rival)) => {
                let written = self.inner.write(ops).await;
                rival.await;
                written
            }
            Some(Action::LoseAnswerAfter(rival)) => {
                self.inner.write(ops).await?;
                rival.await;
                Err(lost())
            }
            Some(Action::FailAfter(rival)) => {
                rival.await;
                Err(lost())
            }
        }
    }

    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        self.inner.delete_many(keys).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        self.inner.purge_expired(limit).await
    }
}

/// An [`ObjectStore`] whose next puts meet scripted faults: the blob is stored, then its
/// answer is lost ([`Fault::LoseAnswer`]), or the put fails before storing anything.
pub struct ScriptedObjects {
    inner: Arc<dyn ObjectStore>,
    faults: Mutex<std::collections::VecDeque<Fault>>,
}

impl ScriptedObjects {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(Self { inner, faults: Mutex::new(std::collections::VecDeque::new()) })
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
impl ObjectStore for ScriptedObjects {
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError> {
        let fault = self.faults.lock().unwrap().pop_front();
        match fault {
            None => self.inner.put(bytes).await,
            Some(Fault::LoseAnswer) => {
                self.inner.put(bytes).await?;
                Err(lost())
            }
            Some(Fault::FailBefore) => Err(lost()),
            Some(Fault::Throttle) => Err(StorageError::Throttled { message: "injected".into(), source: None }),
        }
    }

    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
        self.inner.read(object, position, len).await
    }

    async fn list(&self, after: Option<&str>, limit: usize) -> Result<Vec<ObjectInfo>, StorageError> {
        self.inner.list(after, limit).await
    }

    async fn delete(&self, object: &str) -> Result<(), StorageError> {
        self.inner.delete(object).await
    }

    fn retire(&self, object: &str) {
        self.inner.retire(object)
    }
}
