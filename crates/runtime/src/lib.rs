//! How a Sluice process is put together, apart from what it serves: its configuration (flags
//! or `SLUICE_*` variables, [`Config`]), the backend that configuration selects (embedded
//! files and SQLite, or S3 and DynamoDB with the `aws` feature), the handlers' [`App`] on
//! it, and its janitor. `sluice serve` and every Lambda function start here.

mod backend;
pub mod config;
pub mod push;

use std::sync::Arc;

pub use backend::{janitor, open, open_backend, BackendChoice, IncompleteAwsConfig, OpenError};
pub use config::Config;
pub use sluice_api::App;
use sluice_core::push::Dispatcher;
use sluice_core::queues::Queues;
use sluice_core::{Clock, Log, SystemClock};

/// Opens the embedded backend under `config.data_dir` and starts the log on it.
pub fn open_embedded(config: &Config) -> Result<Log, sluice_core::StorageError> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (store, objects) = sluice_local::open(&config.data_dir, clock.clone())?;
    Ok(Log::new(store, objects, clock, config.log_config(false)))
}

/// The push dispatcher of an embedded process: deliveries over HTTP, private addresses
/// allowed unless the configuration says otherwise.
pub fn dispatcher(config: &Config, queues: Queues) -> Result<Dispatcher, reqwest::Error> {
    let deliver = push::HttpDeliverer::new(config.push_allow_private.unwrap_or(true), config.lambda_endpoint.clone())?;
    Ok(Dispatcher::new(queues, Arc::new(deliver)))
}
