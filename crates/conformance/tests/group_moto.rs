//! The consumer group conformance cases on the AWS adapters (S3 + DynamoDB) against moto's server.

use std::sync::Arc;

use async_trait::async_trait;
use sluice_conformance::moto::MotoBackend;
use sluice_conformance::{group_conformance_suite, Backend, Stores};
use sluice_core::Clock;

/// moto, with the bulk cases cut to a tenth: it serves one request at a time.
struct Moto;

#[async_trait]
impl Backend for Moto {
    async fn open_with(&self, clock: Arc<dyn Clock>) -> Stores {
        MotoBackend.open_with(clock).await
    }

    fn large_count(&self) -> usize {
        10_000
    }
}

async fn moto() -> Moto {
    Moto
}

group_conformance_suite!(moto());
