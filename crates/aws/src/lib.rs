//! The AWS backend: segment objects in S3 ([`S3ObjectStore`]), topics, the
//! segment index and idempotency records in one DynamoDB table
//! ([`DynamoMetaStore`]). The item layout and the reasons for it are in
//! [`dynamo`]'s module header.
//!
//! Retries: the SDKs' own retries are switched off. Their standard policy also
//! retries ambiguous failures (timeouts, 5xx) of conditional writes, and a
//! conditional put that in fact landed, retried, reports a lost race: the log
//! would then commit the same events a second time at the next offset. Here only
//! throttling, which AWS answers before doing anything, is retried (with
//! exponential backoff and full jitter); everything else reaches the caller as
//! [`StorageError::Unavailable`] with the SDK error as its source. Doing the
//! retries here also makes [`RequestCounts`] count every request sent.

pub mod dynamo;
pub mod s3;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
pub use dynamo::DynamoMetaStore;
pub use s3::S3ObjectStore;
use sluice_core::StorageError;

/// Throttled attempts before a request gives up with [`StorageError::Throttled`].
const MAX_THROTTLED_ATTEMPTS: u32 = 6;
const BACKOFF_BASE: Duration = Duration::from_millis(25);
const BACKOFF_CAP: Duration = Duration::from_secs(2);

/// Where the AWS backend lives. `endpoint_url` points both clients at an
/// emulator (moto) instead of AWS.
#[derive(Debug, Clone)]
pub struct AwsSettings {
    pub bucket: String,
    pub table: String,
    /// `None`: the region of the environment (Lambda sets `AWS_REGION`).
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
}

/// Builds both clients from the environment's credentials and region.
pub async fn connect(settings: &AwsSettings) -> (Arc<DynamoMetaStore>, Arc<S3ObjectStore>) {
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).retry_config(RetryConfig::disabled());
    if let Some(region) = &settings.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url.clone());
    }
    let sdk = loader.load().await;
    from_sdk_config(&sdk, settings)
}

/// Builds both clients from an SDK config the caller made (tests pass static credentials).
pub fn from_sdk_config(sdk: &SdkConfig, settings: &AwsSettings) -> (Arc<DynamoMetaStore>, Arc<S3ObjectStore>) {
    let dynamo_config = aws_sdk_dynamodb::config::Builder::from(sdk).retry_config(RetryConfig::disabled()).build();
    // Path-style addressing: emulators on loopback have no per-bucket host names.
    let s3_config = aws_sdk_s3::config::Builder::from(sdk)
        .retry_config(RetryConfig::disabled())
        .force_path_style(settings.endpoint_url.is_some())
        .build();
    let meta = DynamoMetaStore::new(aws_sdk_dynamodb::Client::from_conf(dynamo_config), settings.table.clone());
    let objects = S3ObjectStore::new(aws_sdk_s3::Client::from_conf(s3_config), settings.bucket.clone());
    (Arc::new(meta), Arc::new(objects))
}

/// AWS requests sent, by operation (`"dynamodb:PutItem"`, `"s3:GetObject"`, …),
/// throttled attempts included: what the bill counts.
#[derive(Debug, Default)]
pub struct RequestCounts {
    counts: Mutex<BTreeMap<&'static str, u64>>,
}

impl RequestCounts {
    fn add(&self, operation: &'static str) {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner()).entry(operation).or_default() += 1;
    }

    /// The counts so far, by operation.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Requests of one operation so far.
    pub fn get(&self, operation: &str) -> u64 {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).get(operation).copied().unwrap_or(0)
    }
}

/// Sends one request through `send`, again after a backoff while AWS throttles it.
async fn send_counted<T, E, R, Fut>(
    counts: &RequestCounts,
    operation: &'static str,
    mut send: impl FnMut() -> Fut,
) -> Result<T, SdkError<E, R>>
where
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
    E: ProvideErrorMetadata,
{
    let mut attempt = 0;
    loop {
        counts.add(operation);
        match send().await {
            Err(e) if is_throttling(&e) && attempt + 1 < MAX_THROTTLED_ATTEMPTS => {
                tracing::debug!(operation, attempt, "throttled; backing off");
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// Full jitter: a uniform wait up to an exponentially growing, capped ceiling.
fn backoff(attempt: u32) -> Duration {
    let ceiling = BACKOFF_BASE.saturating_mul(1 << attempt.min(16)).min(BACKOFF_CAP);
    ceiling.mul_f64(rand::random::<f64>())
}

/// Errors AWS returns before doing anything, because the caller is going too fast.
fn is_throttling<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    let Some(service) = e.as_service_error() else { return false };
    matches!(
        service.code(),
        Some(
            "ThrottlingException"
                | "ProvisionedThroughputExceededException"
                | "RequestLimitExceeded"
                | "SlowDown"
                | "TooManyRequestsException"
        )
    )
}

/// The domain error for an SDK failure that no operation-specific case claimed.
fn unexpected<E, R>(operation: &'static str, e: SdkError<E, R>) -> StorageError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let message = match e.code() {
        Some(code) => format!("{operation}: {code}"),
        None => operation.to_owned(),
    };
    if is_throttling(&e) {
        return StorageError::Throttled { message, source: Some(Box::new(e)) };
    }
    StorageError::Unavailable { message, source: Some(Box::new(e)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_under_its_growing_cap() {
        for attempt in 0..20 {
            let ceiling = BACKOFF_BASE.saturating_mul(1 << attempt.min(16)).min(BACKOFF_CAP);
            for _ in 0..50 {
                assert!(backoff(attempt) <= ceiling);
            }
        }
        assert!(BACKOFF_BASE.saturating_mul(1 << 16) > BACKOFF_CAP, "the cap is reached");
    }
}
