//! The conformance suite on the AWS adapters (S3 + DynamoDB) against moto's server.

use sluice_conformance::conformance_suite;
use sluice_conformance::moto::MotoBackend;

async fn moto() -> MotoBackend {
    MotoBackend
}

conformance_suite!(moto());
