//! The state store of a process that dies with the power.

use std::sync::Arc;

use async_trait::async_trait;
use sluice_core::ports::state::{Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::StorageError;
use sluice_local::SqliteStateStore;

use crate::disk::{Power, Step};

/// The real SQLite store, refusing everything once the power is off; its writes count as steps.
/// A write already running at the cut completes: its commit came first.
pub(crate) struct CutState {
    pub(crate) inner: Arc<SqliteStateStore>,
    pub(crate) power: Arc<Power>,
}

impl CutState {
    fn alive(&self) -> Result<(), StorageError> {
        if self.power.is_off() {
            Err(state_power_lost())
        } else {
            Ok(())
        }
    }

    async fn step<T, F>(&self, f: F) -> Result<T, StorageError>
    where
        F: std::future::Future<Output = Result<T, StorageError>>,
    {
        let step = self.power.lock().step("state commit");
        match step {
            Step::Run => f.await,
            Step::RunThenDie => {
                let _ = f.await;
                Err(state_power_lost())
            }
            Step::Dead => Err(state_power_lost()),
        }
    }
}

#[async_trait]
impl StateStore for CutState {
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        self.alive()?;
        self.inner.get(key).await
    }

    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        self.alive()?;
        self.inner.query(query).await
    }

    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        self.step(self.inner.write(ops)).await
    }

    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        self.step(self.inner.delete_many(keys)).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StorageError> {
        self.step(self.inner.purge_expired(limit)).await
    }
}

fn state_power_lost() -> StorageError {
    StorageError::Unavailable { message: "power lost".into(), source: None }
}
