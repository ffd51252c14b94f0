//! The retention suite on the AWS adapters against a moto server of its own: a janitor
//! works on every topic and object in its table and bucket, so these cases share them with
//! no other suite (and take turns among themselves).

async fn moto() -> sluice_conformance::moto::MotoBackend {
    sluice_conformance::moto::MotoBackend
}

sluice_conformance::retention_conformance_suite!(moto());
