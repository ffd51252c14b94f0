//! The AWS backend: segment objects in S3 ([`S3ObjectStore`]), every item of
//! the state store in one DynamoDB table ([`DynamoStateStore`]). The item
//! layout and the requests each call costs are in [`state`]'s module header.
//! Push deliveries to Lambda functions go through [`LambdaInvoker`].
//!
//! Retries: the SDKs' own retries are switched off. Their standard policy also
//! retries ambiguous failures (timeouts, 5xx) of conditional writes, and a
//! conditional put that in fact landed, retried, reports a lost race: the log
//! would then commit the same events a second time at the next offset. Here
//! (`resend.rs`) throttling, which AWS answers before doing anything, is retried for
//! every request, and transient failures (5xx, timeouts, a stale pooled connection)
//! only for requests whose repeat has the effect and the answer of one: reads, a
//! `TransactWriteItems` under its `ClientRequestToken`, deletes without a condition,
//! an object put under a fresh name. Everything else reaches the caller as
//! [`StorageError::Unavailable`] with the SDK error as its source. Doing the retries
//! here also makes [`RequestCounts`] count every request sent.
//!
//! Timeouts: every request, its retries included, has deadlines ([`Deadlines::AWS`])
//! well under the functions' own timeout, so a stalled request ends as
//! [`StorageError::Unavailable`] (for a write: outcome unknown) while the function can
//! still answer, rather than with the function killed mid-request. The core bounds its
//! own retries (a publish's commit) by the invocation's deadline, kept back by
//! [`Deadlines::AWS`]'s `operation` so that its last request ends in time.
//!
//! Connections: pooled connections idle longer than [`POOL_IDLE_TIMEOUT`] are not reused.
//! A function is frozen between invocations, for any time; a connection that sat in the
//! pool across a long freeze has often been closed by the other side, and the next
//! request on it fails. Under the timeout, the first request after such a gap opens a
//! new connection instead.

pub mod billing;
pub mod lambda;
mod resend;
pub mod s3;
pub mod state;
pub mod wake;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
pub use lambda::LambdaInvoker;
pub use s3::S3ObjectStore;
use sluice_core::{Clock, StorageError};
pub use state::DynamoStateStore;
pub use wake::SelfWaker;

/// Pooled connections idle longer are closed rather than reused: shorter than most freezes
/// between invocations, and well under the idle timeouts servers and load balancers
/// commonly close connections at, at the price of a TLS handshake after 4 s of quiet.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// How long a request may take before it ends as [`StorageError::Unavailable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// Most time to open a connection.
    pub connect: Duration,
    /// Most time for one attempt of a request, response included.
    pub attempt: Duration,
    /// Most time for one request, every attempt the SDK makes included.
    pub operation: Duration,
}

impl Deadlines {
    /// On AWS: well under the functions' timeout (template.yaml's Globals).
    pub const AWS: Self =
        Self { connect: Duration::from_secs(3), attempt: Duration::from_secs(5), operation: Duration::from_secs(10) };
}

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

/// The HTTPS client of every SDK client here: hyper 1 and rustls with ring, the TLS stack
/// reqwest (push deliveries) uses too. The SDK's own default, built without its
/// `default-https-client` feature (see the workspace's Cargo.toml), would add aws-lc.
pub fn http_client() -> aws_sdk_dynamodb::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    aws_smithy_http_client::Builder::new()
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// Builds both clients from the environment's credentials and region; `clock`
/// decides which state items have expired.
pub async fn connect(settings: &AwsSettings, clock: Arc<dyn Clock>) -> (Arc<DynamoStateStore>, Arc<S3ObjectStore>) {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .retry_config(RetryConfig::disabled())
        .timeout_config(timeouts(Deadlines::AWS));
    if let Some(region) = &settings.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url.clone());
    }
    let sdk = loader.load().await;
    from_sdk_config(&sdk, settings, clock, Deadlines::AWS)
}

/// Builds both clients from an SDK config the caller made (tests pass static
/// credentials), with this backend's retries and `deadlines` whatever `sdk` holds.
pub fn from_sdk_config(
    sdk: &SdkConfig,
    settings: &AwsSettings,
    clock: Arc<dyn Clock>,
    deadlines: Deadlines,
) -> (Arc<DynamoStateStore>, Arc<S3ObjectStore>) {
    let dynamo_config = aws_sdk_dynamodb::config::Builder::from(sdk)
        .retry_config(RetryConfig::disabled())
        .timeout_config(timeouts(deadlines))
        .build();
    // Path-style addressing: emulators on loopback have no per-bucket host names.
    let s3_config = aws_sdk_s3::config::Builder::from(sdk)
        .retry_config(RetryConfig::disabled())
        .timeout_config(timeouts(deadlines))
        .force_path_style(settings.endpoint_url.is_some())
        .build();
    let dynamo = aws_sdk_dynamodb::Client::from_conf(dynamo_config);
    let state = DynamoStateStore::new(dynamo, settings.table.clone(), clock, deadlines);
    let objects = S3ObjectStore::new(aws_sdk_s3::Client::from_conf(s3_config), settings.bucket.clone(), deadlines);
    (Arc::new(state), Arc::new(objects))
}

/// The SDK's form of `deadlines`, for every request both clients send.
fn timeouts(deadlines: Deadlines) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(deadlines.connect)
        .operation_attempt_timeout(deadlines.attempt)
        .operation_timeout(deadlines.operation)
        .build()
}

/// AWS requests sent, by operation (`"dynamodb:UpdateItem"`, `"s3:GetObject"`, …),
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
    // A transaction in flight on the item refused a single-item write before it did anything.
    if resend::is_throttling(&e) || e.code() == Some("TransactionConflictException") {
        return StorageError::Throttled { message, source: Some(Box::new(e)) };
    }
    // A request DynamoDB will never accept (an item over 400 KB, …): nothing was written.
    if e.code() == Some("ValidationException") {
        return StorageError::Invalid(format!("{message}: {}", e.message().unwrap_or("")));
    }
    StorageError::Unavailable { message, source: Some(Box::new(e)) }
}
