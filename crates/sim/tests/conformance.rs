//! The in-memory stores pass the conformance suites every backend passes (the port cases,
//! and the log, group, queue, retention and push cases on top of them), so the simulation
//! runs the core over stores that honour the contract, not over looser ones.

use std::sync::Arc;

use async_trait::async_trait;
use sluice_conformance::{Backend, Stores};
use sluice_core::Clock;
use sluice_testkit::{MemObjects, MemStore};

/// One in-memory backend: every `open_with` is another handle on the same data.
pub struct Memory {
    state: MemStore,
    objects: MemObjects,
}

#[async_trait]
impl Backend for Memory {
    async fn open_with(&self, clock: Arc<dyn Clock>) -> Stores {
        (Arc::new(self.state.handle(clock.clone())), Arc::new(self.objects.handle(clock)))
    }

    fn large_count(&self) -> usize {
        5_000
    }
}

pub async fn memory() -> Memory {
    let clock: Arc<dyn Clock> = Arc::new(sluice_core::SystemClock);
    Memory { state: MemStore::new(clock.clone()), objects: MemObjects::new(clock) }
}

mod store {
    use sluice_conformance::store::Purge;

    sluice_conformance::store_conformance_suite!(super::memory(), Purge::Deletes);
}

mod log {
    sluice_conformance::log_conformance_suite!(super::memory());
}

mod group {
    sluice_conformance::group_conformance_suite!(super::memory());
}

mod queue {
    sluice_conformance::queue_conformance_suite!(super::memory());
}

mod retention {
    sluice_conformance::retention_conformance_suite!(super::memory());
}

mod objects {
    sluice_conformance::objects_conformance_suite!(super::memory());
}

mod push {
    sluice_conformance::push_conformance_suite!(super::memory());
}
