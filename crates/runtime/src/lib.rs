//! How a Sluice process is put together, apart from what it serves: its configuration (flags
//! or `SLUICE_*` variables, [`Config`]), the backend that configuration selects (embedded
//! files and SQLite, or S3 and DynamoDB with the `aws` feature), the handlers' [`App`] on
//! it, and its janitor. `sluice serve` and every Lambda function start here.

mod backend;
pub mod config;
pub mod metrics;
pub mod push;
#[cfg(feature = "embedded")]
mod serve;
#[cfg(feature = "embedded")]
mod ui;

use std::sync::Arc;

pub use backend::{janitor, open, open_backend, BackendChoice, IncompleteAwsConfig, OpenError};
pub use config::Config;
#[cfg(feature = "embedded")]
pub use serve::{serve, LocalServer, Opened};
pub use sluice_api::App;
use sluice_core::push::Dispatcher;
use sluice_core::queues::Queues;

/// An invocation's deadline in Unix milliseconds, from what its Lambda context says. Lambda
/// gives the absolute time; `cargo lambda watch` gives the timeout itself, a duration
/// from now (600000 by default), which is taken for one when it is too small to be a time
/// of this century, so a function keeps its time budget locally as on AWS.
pub fn invocation_deadline_ms(context_deadline: u64, now_ms: i64) -> i64 {
    const YEAR_2001_MS: u64 = 978_307_200_000;
    if context_deadline < YEAR_2001_MS {
        now_ms.saturating_add(context_deadline as i64)
    } else {
        context_deadline as i64
    }
}

/// Opens the embedded backend under `config.data_dir` and starts the log on it.
#[cfg(feature = "embedded")]
pub fn open_embedded(config: &Config) -> Result<sluice_core::Log, sluice_core::StorageError> {
    use sluice_core::{Clock, Log, SystemClock};
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (store, objects) = sluice_local::open_with_window(&config.data_dir, clock.clone(), config.sync_window_ms)?;
    Ok(Log::new(store, objects, clock, config.log_config(false)))
}

/// The push dispatcher for `config`'s backend: webhooks over HTTP, private addresses
/// allowed on the embedded backend and refused on AWS unless the configuration says
/// otherwise. Lambda targets are invoked at `SLUICE_LAMBDA_ENDPOINT` over plain HTTP on the
/// embedded backend, and with the AWS SDK on AWS (at that endpoint if it is set).
///
/// `wake_as` names the dispatcher function itself (Lambda's `AWS_LAMBDA_FUNCTION_NAME`): on
/// AWS its stream runs wake it, through the same Lambda client, for a due time they hand
/// over; not on an emulated AWS (`SLUICE_AWS_ENDPOINT_URL`) without a Lambda endpoint to
/// invoke, nor on the embedded backend (`serve`'s workers long-poll).
pub async fn dispatcher(config: &Config, queues: Queues, wake_as: Option<String>) -> Result<Dispatcher, OpenError> {
    let backend = config.backend()?;
    let aws = matches!(backend, BackendChoice::Aws { .. });
    let allow_private = config.push_allow_private.unwrap_or(!aws);
    let deliver = push::HttpDeliverer::new(allow_private, config.lambda_endpoint.clone()).map_err(OpenError::Http)?;
    #[cfg(feature = "aws")]
    if let BackendChoice::Aws { region, .. } = backend {
        let lambda = sluice_aws::LambdaInvoker::connect(region, config.lambda_endpoint.clone()).await;
        let waker = wake_as
            .filter(|_| config.aws_endpoint_url.is_none() || config.lambda_endpoint.is_some())
            .map(|function| lambda.waker(function));
        let dispatcher = Dispatcher::new(queues, Arc::new(deliver.with_lambda(Arc::new(lambda))));
        return Ok(match waker {
            Some(waker) => dispatcher.with_wakes(Arc::new(waker)),
            None => dispatcher,
        });
    }
    let _ = wake_as;
    Ok(Dispatcher::new(queues, Arc::new(deliver)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn given_an_absolute_deadline_then_kept_and_a_duration_then_counted_from_now() {
        let now = 1_796_225_525_275;
        assert_eq!(super::invocation_deadline_ms(1_796_225_545_000, now), 1_796_225_545_000);
        assert_eq!(super::invocation_deadline_ms(600_000, now), now + 600_000);
    }
}
