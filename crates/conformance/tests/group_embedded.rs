//! The consumer group conformance cases on the embedded backend (local files + SQLite).

use std::sync::Arc;

use async_trait::async_trait;
use sluice_conformance::{group_conformance_suite, Backend, Stores};
use sluice_core::Clock;
use tempfile::TempDir;

/// A fresh data directory per case; each `open` is another process's view of it.
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

group_conformance_suite!(embedded());
