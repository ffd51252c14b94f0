//! The push suite on the AWS adapters against a moto server of its own: its dispatcher
//! drains in many short rounds, and a server that serves one request at a time is best
//! not shared with the other suites' concurrent cases (its own lane in infra/test.sh).

async fn moto() -> sluice_conformance::moto::MotoBackend {
    sluice_conformance::moto::MotoBackend
}

sluice_conformance::push_conformance_suite!(moto());
