//! The read Lambda function: reading: replay (`GET …/partitions/{p}/events`) and offset lookup (`GET …/offsets`),
//! behind API Gateway (HTTP API, payload v2). It serves the same axum router as
//! `sluice serve`, so the routes behave the same everywhere.

use lambda_http::{tracing, Error};
use sluice_runtime::Config;

#[tokio::main]
async fn main() -> Result<(), Error> {
    // JSON lines when the function's log format is JSON (template.yaml sets it).
    tracing::init_default_subscriber();
    let config = Config::from_env()?;
    let app = sluice_runtime::open(&config).await?;
    // Each invocation's metrics go to the log as CloudWatch EMF when it ends.
    sluice_runtime::metrics::emf::run_http(sluice_api::read_router(app)).await
}
