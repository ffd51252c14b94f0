//! Which storage a process runs on, decided once from its [`Config`]: the AWS
//! adapters when `SLUICE_BUCKET` and `SLUICE_TABLE` are set, the embedded
//! backend in `SLUICE_DATA_DIR` otherwise, so the same binary (or Lambda
//! function under `cargo lambda watch`) works on a laptop with no AWS at all.

use std::path::PathBuf;
use std::sync::Arc;

#[cfg(feature = "aws")]
use sluice_aws::AwsSettings;
use sluice_core::upkeep::{Janitor, JanitorConfig};
use sluice_core::{Clock, Log, ObjectStore, StateStore, StorageError, SystemClock};

use crate::{App, Config};

/// Where the data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendChoice {
    Embedded(PathBuf),
    Aws { bucket: String, table: String, region: Option<String>, endpoint_url: Option<String> },
}

/// The configuration names half of the AWS backend.
#[derive(Debug, thiserror::Error)]
#[error("SLUICE_BUCKET and SLUICE_TABLE must be set together (only {set} is)")]
pub struct IncompleteAwsConfig {
    set: &'static str,
}

/// Why a backend could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Config(#[from] IncompleteAwsConfig),
    #[error("cannot open the embedded backend")]
    Storage(#[from] StorageError),
    #[error(
        "SLUICE_BUCKET and SLUICE_TABLE select AWS, but this build has no AWS backend (sluice-runtime's `aws` feature)"
    )]
    NoAwsBackend,
    #[error(
        "no SLUICE_BUCKET and SLUICE_TABLE, and this build has no embedded backend (sluice-runtime's `embedded` feature)"
    )]
    NoEmbeddedBackend,
    /// On Lambda the embedded backend would write to the instance's /tmp, which vanishes
    /// with it: acknowledged events would be lost. Only an explicit data dir (a local run
    /// under `cargo lambda watch`) selects it there.
    #[error(
        "running on Lambda without SLUICE_BUCKET and SLUICE_TABLE: refusing to fall back to local storage \
         (set SLUICE_DATA_DIR explicitly to run the function on the embedded backend)"
    )]
    NoStorageOnLambda,
    #[error("cannot build the HTTP client")]
    Http(#[source] reqwest::Error),
}

/// An unset variable, or one set to the empty string (how a template leaves it unset).
fn given(v: &Option<String>) -> Option<String> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
}

impl Config {
    /// The backend this configuration selects.
    pub fn backend(&self) -> Result<BackendChoice, IncompleteAwsConfig> {
        match (given(&self.bucket), given(&self.table)) {
            (Some(bucket), Some(table)) => Ok(BackendChoice::Aws {
                bucket,
                table,
                region: given(&self.aws_region),
                endpoint_url: given(&self.aws_endpoint_url),
            }),
            (None, None) => Ok(BackendChoice::Embedded(self.data_dir.clone())),
            (Some(_), None) => Err(IncompleteAwsConfig { set: "SLUICE_BUCKET" }),
            (None, Some(_)) => Err(IncompleteAwsConfig { set: "SLUICE_TABLE" }),
        }
    }
}

/// Whether this process is a Lambda function (or one emulated by `cargo lambda watch`).
fn on_lambda() -> bool {
    std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some()
}

/// Opens the backend the configuration selects and starts the log on it.
// Built with neither backend (`cargo build -p sluice-runtime` alone), every arm refuses.
#[cfg_attr(not(any(feature = "embedded", feature = "aws")), allow(unreachable_code, unused_variables))]
pub async fn open_backend(config: &Config) -> Result<Log, OpenError> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let choice = config.backend()?;
    let aws = matches!(choice, BackendChoice::Aws { .. });
    let (store, objects): (Arc<dyn StateStore>, Arc<dyn ObjectStore>) = match choice {
        BackendChoice::Embedded(_) if on_lambda() && std::env::var_os("SLUICE_DATA_DIR").is_none() => {
            return Err(OpenError::NoStorageOnLambda);
        }
        #[cfg(not(feature = "embedded"))]
        BackendChoice::Embedded(_) => return Err(OpenError::NoEmbeddedBackend),
        #[cfg(feature = "embedded")]
        BackendChoice::Embedded(dir) => {
            let (store, objects) = sluice_local::open_with_window(&dir, clock.clone(), config.sync_window_ms)?;
            tracing::info!(data_dir = %dir.display(), sync_window_ms = config.sync_window_ms, "embedded backend");
            (store, objects)
        }
        #[cfg(not(feature = "aws"))]
        BackendChoice::Aws { .. } => return Err(OpenError::NoAwsBackend),
        #[cfg(feature = "aws")]
        BackendChoice::Aws { bucket, table, region, endpoint_url } => {
            tracing::info!(%bucket, %table, endpoint = endpoint_url.as_deref().unwrap_or("aws"), "aws backend");
            let settings = AwsSettings { bucket, table, region, endpoint_url };
            let (store, objects) = sluice_aws::connect(&settings, clock.clone()).await;
            (store, objects)
        }
    };
    Ok(Log::new(store, objects, clock, config.log_config(aws)))
}

/// Opens the backend the configuration selects and builds the handlers' [`App`] on it. On
/// AWS, a push subscription's Lambda target is asked its timeout when the subscription is
/// created (`Queues::with_push_targets`); not with an endpoint override (an emulator,
/// `cargo lambda watch` or moto, whose functions may not answer it), nor on the embedded
/// backend.
pub async fn open(config: &Config) -> Result<App, OpenError> {
    #[cfg_attr(not(feature = "aws"), allow(unused_mut))]
    let mut app = App::new(open_backend(config).await?, config.groups_config());
    #[cfg(feature = "aws")]
    if let (BackendChoice::Aws { region, endpoint_url: None, .. }, None) = (config.backend()?, &config.lambda_endpoint)
    {
        let lambda = sluice_aws::LambdaInvoker::connect(region, None).await;
        app.queues = app.queues.with_push_targets(Arc::new(lambda));
    }
    Ok(app)
}

/// The janitor of `log`'s backend. On the embedded backend it writes each segment it compacts
/// to a blob file of its own, and moves every segment a commit wrote (to a file shared by the
/// partitions of its group) alone to one as well, so that retention frees whole files and the
/// disk follows it (docs/DESIGN.md, "Disk that follows retention"). On S3 every blob is an
/// object of its own, and a commit's stays where it is (a move would cost requests).
pub fn janitor(config: &Config, log: &Log) -> Result<Janitor, OpenError> {
    let (objects, settle): (Arc<dyn ObjectStore>, bool) = match config.backend()? {
        #[cfg(not(feature = "embedded"))]
        BackendChoice::Embedded(_) => return Err(OpenError::NoEmbeddedBackend),
        #[cfg(feature = "embedded")]
        BackendChoice::Embedded(dir) => (Arc::new(sluice_local::open_upkeep_objects(&dir)?), true),
        BackendChoice::Aws { .. } => (log.objects().clone(), false),
    };
    let janitor_config = JanitorConfig { settle_commit_segments: settle, ..config.janitor_config() };
    Ok(Janitor::new(log.store().clone(), objects, log.clock().clone(), janitor_config))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        config: Config,
    }

    fn config(args: &[&str]) -> Config {
        Args::try_parse_from(std::iter::once("sluice").chain(args.iter().copied())).unwrap().config
    }

    #[test]
    fn no_aws_config_selects_the_embedded_backend() {
        let choice = config(&["--data-dir", "/tmp/x", "--aws-endpoint-url", ""]).backend().unwrap();
        assert_eq!(choice, BackendChoice::Embedded(PathBuf::from("/tmp/x")));
    }

    #[test]
    fn bucket_and_table_select_aws() {
        let choice = config(&["--bucket", "b", "--table", "t", "--aws-endpoint-url", ""]).backend().unwrap();
        let expected = BackendChoice::Aws { bucket: "b".into(), table: "t".into(), region: None, endpoint_url: None };
        assert_eq!(choice, expected, "an empty endpoint means AWS itself");
    }

    #[test]
    fn the_sync_window_is_the_embedded_backends_default_unless_set() {
        #[cfg(feature = "embedded")]
        assert_eq!(crate::config::DEFAULT_SYNC_WINDOW_MS, sluice_local::DEFAULT_SYNC_WINDOW_MS);
        assert_eq!(config(&[]).sync_window_ms, crate::config::DEFAULT_SYNC_WINDOW_MS);
        assert_eq!(config(&["--sync-window-ms", "0"]).sync_window_ms, 0);
    }

    #[test]
    fn half_an_aws_config_is_refused() {
        assert!(config(&["--bucket", "b"]).backend().is_err());
        assert!(config(&["--table", "t", "--bucket", " "]).backend().is_err());
    }
}
