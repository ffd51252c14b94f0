//! The in-memory backend ([`sluice_testkit`]'s `MemStore` and `MemObjects`) under test: the
//! simulation runs the core over these stores, so they must honour the contract every
//! backend honours, not a looser one.

use std::sync::Arc;

use async_trait::async_trait;
use sluice_core::Clock;
use sluice_testkit::{MemObjects, MemStore};

use crate::{Backend, Stores};

/// One in-memory backend: every `open_with` is another handle on the same data.
pub struct Memory {
    state: MemStore,
    objects: MemObjects,
}

#[async_trait]
impl Backend for Memory {
    async fn open_with(&self, clock: Arc<dyn Clock>) -> Stores {
        // The in-memory stores stand in for DynamoDB (as in the simulation): commit as the AWS
        // functions do, so every case runs the single-write path too.
        crate::commits_in_one_write();
        (Arc::new(self.state.handle(clock.clone())), Arc::new(self.objects.handle(clock)))
    }

    fn large_count(&self) -> usize {
        5_000
    }
}

/// A new, empty in-memory backend.
pub async fn memory() -> Memory {
    let clock: Arc<dyn Clock> = Arc::new(sluice_core::SystemClock);
    Memory { state: MemStore::new(clock.clone()), objects: MemObjects::new(clock) }
}
