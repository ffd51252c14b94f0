//! The conformance suite on the embedded backend (local files + SQLite).

use async_trait::async_trait;
use sluice_conformance::{conformance_suite, Backend, Stores};
use tempfile::TempDir;

/// A fresh data directory per case; each `open` is another process's view of it.
struct Embedded {
    dir: TempDir,
}

#[async_trait]
impl Backend for Embedded {
    async fn open(&self) -> Stores {
        let (meta, objects) = sluice_local::open(self.dir.path()).expect("open the embedded backend");
        (meta, objects)
    }
}

async fn embedded() -> Embedded {
    Embedded { dir: tempfile::tempdir().expect("temp dir") }
}

conformance_suite!(embedded());
