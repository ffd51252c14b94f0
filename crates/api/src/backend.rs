//! Which storage a process runs on, decided once from its [`Config`]: the AWS
//! adapters when `SLUICE_BUCKET` and `SLUICE_TABLE` are set, the embedded
//! backend in `SLUICE_DATA_DIR` otherwise, so the same binary (or Lambda
//! function under `cargo lambda watch`) works on a laptop with no AWS at all.

use std::path::PathBuf;
use std::sync::Arc;

#[cfg(feature = "aws")]
use sluice_aws::AwsSettings;
use sluice_core::{Log, LogConfig, MetaStore, ObjectStore, StorageError, SystemClock};

use crate::Config;

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
        "SLUICE_BUCKET and SLUICE_TABLE select AWS, but this build has no AWS backend (sluice-api's `aws` feature)"
    )]
    NoAwsBackend,
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

/// Opens the backend the configuration selects and starts the log on it.
pub async fn open_backend(config: &Config) -> Result<Log, OpenError> {
    let (meta, objects): (Arc<dyn MetaStore>, Arc<dyn ObjectStore>) = match config.backend()? {
        BackendChoice::Embedded(dir) => {
            let (meta, objects) = sluice_local::open(&dir)?;
            tracing::info!(data_dir = %dir.display(), "embedded backend");
            (meta, objects)
        }
        #[cfg(not(feature = "aws"))]
        BackendChoice::Aws { .. } => return Err(OpenError::NoAwsBackend),
        #[cfg(feature = "aws")]
        BackendChoice::Aws { bucket, table, region, endpoint_url } => {
            tracing::info!(%bucket, %table, endpoint = endpoint_url.as_deref().unwrap_or("aws"), "aws backend");
            let (meta, objects) = sluice_aws::connect(&AwsSettings { bucket, table, region, endpoint_url }).await;
            (meta, objects)
        }
    };
    let log_config = LogConfig { limits: config.limits(), ..LogConfig::default() };
    Ok(Log::new(meta, objects, Arc::new(SystemClock), log_config))
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
    fn half_an_aws_config_is_refused() {
        assert!(config(&["--bucket", "b"]).backend().is_err());
        assert!(config(&["--table", "t", "--bucket", " "]).backend().is_err());
    }
}
