//! One storage conformance suite, written once and run against every backend
//! (object_store's `integration.rs` pattern): the embedded backend on every run,
//! the AWS adapters against moto's server (`tests/embedded.rs`, `tests/moto.rs`:
//! each invokes the port, log, group and queue suites' macros on its [`Backend`]).
//!
//! Each case uses keys and topics of its own (random names), so cases can share
//! one moto server or one data directory and run in parallel.

pub mod embedded;
pub mod faults;
pub mod group_cases;
mod group_fault_cases;
pub mod log_cases;
pub mod lost_answer_cases;
pub mod moto;
pub mod queue_cases;
mod queue_fault_cases;
pub mod retention_cases;
pub mod store;

use std::sync::Arc;

use async_trait::async_trait;
use sluice_core::store::StateStore;
use sluice_core::{Clock, ObjectStore};

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

    /// [`Backend::open_with`] the system clock.
    async fn open(&self) -> Stores {
        self.open_with(Arc::new(sluice_core::SystemClock)).await
    }
}

/// A name no other case uses.
pub fn unique_topic(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}
