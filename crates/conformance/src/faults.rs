//! A state store that meets scripted events at chosen writes and queries: a fault (the
//! answer lost after the write applied, a failure before it, a query torn by a concurrent
//! write), or a rival's work run just before or just after the call, so a case can place
//! an interleaving exactly where it matters.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sluice_core::store::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::StorageError;

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
        }
    }

    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        self.inner.delete_many(keys).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        self.inner.purge_expired(limit).await
    }
}
