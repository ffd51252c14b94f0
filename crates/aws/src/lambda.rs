//! Push deliveries to Lambda functions ([`LambdaInvoker`]): one synchronous `Invoke`
//! (RequestResponse) per delivery, signed by the SDK, with the delivery's body as payload.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_lambda::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::operation::invoke::InvokeError;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use sluice_core::ports::deliver::{Answer, Deliver, Delivery, Destination, MAX_ANSWER_BYTES};

/// Invokes Lambda targets. The SDK retries nothing: a failed attempt is the queue's to
/// redeliver (after the subscription's backoff, or a throttle's `Retry-After`), and an
/// invocation retried after a timeout would run the function twice in one attempt.
#[derive(Clone)]
pub struct LambdaInvoker {
    client: aws_sdk_lambda::Client,
}

impl LambdaInvoker {
    /// A client for the environment's credentials in `region`; `endpoint_url` points it at
    /// an emulator of the Invoke API (`cargo lambda watch`) instead of Lambda.
    pub async fn connect(region: Option<String>, endpoint_url: Option<String>) -> Self {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(RetryConfig::disabled())
            // Only the connection: an attempt lasts as long as the delivery allows.
            .timeout_config(TimeoutConfig::builder().connect_timeout(Duration::from_secs(3)).build());
        if let Some(region) = region {
            loader = loader.region(Region::new(region));
        }
        if let Some(url) = endpoint_url {
            loader = loader.endpoint_url(url);
        }
        Self { client: aws_sdk_lambda::Client::new(&loader.load().await) }
    }
}

#[async_trait]
impl Deliver for LambdaInvoker {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        let Destination::Lambda(function) = &delivery.destination else {
            return Answer::Failed("not a Lambda target".into());
        };
        let invoke = self
            .client
            .invoke()
            .function_name(function)
            .invocation_type(InvocationType::RequestResponse)
            .payload(Blob::new(delivery.body.to_vec()))
            .send();
        match tokio::time::timeout(Duration::from_millis(delivery.timeout_ms), invoke).await {
            Err(_) => Answer::Failed("timed out".into()),
            Ok(Ok(out)) => {
                let mut body = out.payload.map(Blob::into_inner).unwrap_or_default();
                body.truncate(MAX_ANSWER_BYTES);
                // The function's own error (it threw, or timed out) comes back as 200.
                let status = if out.function_error.is_some() { 502 } else { out.status_code as u16 };
                Answer::Status { status, retry_after_ms: None, body }
            }
            Ok(Err(e)) => answer_of_error(e),
        }
    }
}

/// A refused invocation as the answer it stands for: a throttle is a 429 (with the delay
/// Lambda asks for), another service error its HTTP status, anything else a failure.
fn answer_of_error(e: SdkError<InvokeError>) -> Answer {
    let status = e.raw_response().map(|r| r.status().as_u16());
    match (e, status) {
        (SdkError::ServiceError(service), Some(status)) => {
            let err = service.into_err();
            let retry_after_ms = match &err {
                InvokeError::TooManyRequestsException(t) => {
                    t.retry_after_seconds().and_then(|s| s.trim().parse::<u64>().ok()).map(|s| s * 1000)
                }
                _ => None,
            };
            let message = format!("{}: {}", err.code().unwrap_or("error"), err.message().unwrap_or_default());
            Answer::Status { status, retry_after_ms, body: message.into_bytes() }
        }
        (e, _) => Answer::Failed(std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string())),
    }
}
