//! The state-store conformance suite on the embedded backend (SQLite).

use std::sync::Arc;

use async_trait::async_trait;
use sluice_conformance::store::Purge;
use sluice_conformance::{store_conformance_suite, Backend, Stores};
use sluice_core::Clock;
use tempfile::TempDir;

/// A fresh data directory per case; each `open_with` is another process's view of it.
struct Embedded {
    dir: TempDir,
}

#[async_trait]
impl Backend for Embedded {
    async fn open_with(&self, clock: Arc<dyn Clock>) -> Stores {
        let (state, objects) = sluice_local::open(self.dir.path(), clock).expect("open the embedded backend");
        (state, objects)
    }
}

async fn embedded() -> Embedded {
    Embedded { dir: tempfile::tempdir().expect("temp dir") }
}

store_conformance_suite!(embedded(), Purge::Deletes);
