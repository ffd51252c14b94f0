//! A meter for the DynamoDB adapter: a [`StateStore`] that passes every call to a
//! [`DynamoStateStore`] and tallies the read and write units DynamoDB bills for it
//! ([`sluice_aws::billing`]'s rules). A write is billed by the size of the items it replaces,
//! deletes or checks, which the meter reads first through a second adapter of its own, so
//! those reads are neither counted as the operation's requests nor billed to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sluice_aws::billing;
use sluice_aws::{DynamoStateStore, RequestCounts};
use sluice_core::ports::state::{Expect, Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::StorageError;

/// Request units billed so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Units {
    pub read: u64,
    pub write: u64,
}

/// A [`DynamoStateStore`] with a meter of the units it is billed.
pub struct Billed {
    inner: Arc<DynamoStateStore>,
    peek: Arc<DynamoStateStore>,
    units: Mutex<Units>,
}

impl Billed {
    /// Meters `inner`; `peek` is another adapter on the same table, for the sizes of items
    /// before a write.
    pub fn new(inner: Arc<DynamoStateStore>, peek: Arc<DynamoStateStore>) -> Self {
        Self { inner, peek, units: Mutex::new(Units::default()) }
    }

    /// The requests `inner` sent, by operation.
    pub fn requests(&self) -> &RequestCounts {
        self.inner.requests()
    }

    /// The units billed so far.
    pub fn units(&self) -> Units {
        *self.units.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bill(&self, f: impl FnOnce(&mut Units)) {
        f(&mut self.units.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// The items these keys hold now.
    async fn before(&self, keys: impl Iterator<Item = &Key>) -> Result<HashMap<Key, Option<Item>>, StorageError> {
        let mut found = HashMap::new();
        for key in keys {
            found.insert(key.clone(), self.peek.get(key).await?);
        }
        Ok(found)
    }
}

#[async_trait]
impl StateStore for Billed {
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        let item = self.inner.get(key).await?;
        let units = billing::read_units(item.as_ref().map_or(0, billing::stored_bytes));
        self.bill(|u| u.read += units);
        Ok(item)
    }

    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        let page = self.inner.query(query).await?;
        let units = billing::read_units(page.items.iter().map(billing::stored_bytes).sum());
        self.bill(|u| u.read += units);
        Ok(page)
    }

    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        // A create's item is absent if it lands at all: nothing to read for it.
        let replaced = ops.iter().filter(|op| !matches!(op, WriteOp::Put { expect: Expect::Absent, .. }));
        let before = self.before(replaced.map(WriteOp::key)).await?;
        let units = billing::write_units(&ops, |k| before.get(k).cloned().flatten());
        // A write whose condition fails is billed too.
        let written = self.inner.write(ops).await;
        self.bill(|u| u.write += units);
        written
    }

    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        let before = self.before(keys.iter()).await?;
        let units = billing::batch_delete_units(before.into_values());
        self.inner.delete_many(keys).await?;
        self.bill(|u| u.write += units);
        Ok(())
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        self.inner.purge_expired(limit).await
    }
}
