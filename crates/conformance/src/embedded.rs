//! The embedded backend (local files + SQLite) under test.

use std::sync::Arc;

use async_trait::async_trait;
use sluice_core::Clock;
use tempfile::TempDir;

use crate::{Backend, Stores};

/// A fresh data directory per case; each `open_with` opens it again, as another process would.
pub struct Embedded {
    dir: TempDir,
}

#[async_trait]
impl Backend for Embedded {
    async fn open_with(&self, clock: Arc<dyn Clock>) -> Stores {
        let (state, objects) = sluice_local::open(self.dir.path(), clock).expect("open the embedded backend");
        (state, objects)
    }

    fn caches_subscriptions(&self) -> bool {
        true
    }
}

/// A new embedded backend in a temporary directory, removed when it is dropped.
pub async fn embedded() -> Embedded {
    Embedded { dir: tempfile::tempdir().expect("temp dir") }
}
