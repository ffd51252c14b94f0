//! Push deliveries to Lambda functions ([`LambdaInvoker`]): one synchronous `Invoke`
//! (RequestResponse) per delivery, signed by the SDK, with the delivery's body as payload,
//! and its W3C trace context as the X-Ray trace header Lambda continues the trace from.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_lambda::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::operation::invoke::InvokeError;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use sluice_core::ports::deliver::{Answer, Deliver, Delivery, Destination, TargetError, Targets, MAX_ANSWER_BYTES};
use sluice_core::trace::{TraceParent, TRACEPARENT, XRAY_HEADER};

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
            .http_client(crate::http_client())
            .retry_config(RetryConfig::disabled())
            // Only the connection: an attempt lasts as long as the delivery allows.
            .timeout_config(TimeoutConfig::builder().connect_timeout(Duration::from_secs(3)).build());
        if let Some(region) = region {
            loader = loader.region(Region::new(region));
        }
        if let Some(url) = endpoint_url {
            loader = loader.endpoint_url(url);
        }
        Self::from_sdk_config(&loader.load().await)
    }

    /// A client for an SDK configuration made elsewhere (its credentials, region, endpoint).
    pub fn from_sdk_config(config: &aws_config::SdkConfig) -> Self {
        Self { client: aws_sdk_lambda::Client::new(config) }
    }

    /// A waker of the dispatcher function `function` through this client (no retries: a
    /// wake is a hint, the next sweep stands in for a lost one).
    pub fn waker(&self, function: impl Into<String>) -> crate::SelfWaker {
        crate::SelfWaker::with_client(Clone::clone(&self.client), function)
    }
}

#[async_trait]
impl Deliver for LambdaInvoker {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        let Destination::Lambda(function) = &delivery.destination else {
            return Answer::Failed("not a Lambda target".into());
        };
        let xray = xray_trace_header(delivery);
        let invoke = self
            .client
            .invoke()
            .function_name(function)
            .invocation_type(InvocationType::RequestResponse)
            .payload(Blob::new(delivery.body.to_vec()))
            .customize()
            // Set before the SDK's own (the dispatcher's trace, from `_X_AMZN_TRACE_ID`), which then stands aside.
            .mutate_request(move |request| {
                if let Some(xray) = &xray {
                    request.headers_mut().insert(XRAY_HEADER, xray.clone());
                }
            })
            .send();
        match tokio::time::timeout(Duration::from_millis(delivery.timeout_ms), invoke).await {
            Err(_) => Answer::TimedOut,
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

/// A function's timeout from `GetFunctionConfiguration` (IAM:
/// `lambda:GetFunctionConfiguration` on the targets' ARNs): a function that is not there or
/// may not be read is refused (the creator's to fix); a throttle, a 5xx or no connection is
/// unavailable.
#[async_trait]
impl Targets for LambdaInvoker {
    async fn lambda_timeout_ms(&self, function: &str) -> Result<u64, TargetError> {
        match self.client.get_function_configuration().function_name(function).send().await {
            // Lambda's default (3 s) when the answer names none.
            Ok(config) => Ok(config.timeout().map_or(3_000, |s| u64::from(s.unsigned_abs()) * 1000)),
            Err(e) => {
                let status = e.raw_response().map(|r| r.status().as_u16());
                let why = match e.as_service_error() {
                    Some(err) => format!("{}: {}", err.code().unwrap_or("error"), err.message().unwrap_or_default()),
                    None => std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string()),
                };
                match status {
                    Some(400..=428) | Some(430..=499) => Err(TargetError::Refused(why)),
                    _ => Err(TargetError::Unavailable(why)),
                }
            }
        }
    }
}

/// The `X-Amzn-Trace-Id` of an invocation: the delivery's `traceparent` (the trace context
/// its batch shares) in X-Ray's spelling, so the target's invocation joins the producer's
/// trace; `None` without one.
fn xray_trace_header(delivery: &Delivery) -> Option<String> {
    let (_, traceparent) = delivery.headers.iter().find(|(name, _)| name == TRACEPARENT)?;
    TraceParent::parse(traceparent).ok().map(|p| p.to_xray())
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

#[cfg(test)]
mod tests {
    use aws_sdk_lambda::config::{BehaviorVersion, Credentials, Region};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Answers one Invoke with `{}` (a function that acked the batch), sending back the
    /// request's head, lowercased.
    async fn one_invoke() -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&seen).contains("\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended before its head");
                seen.extend_from_slice(&buf[..n]);
            }
            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
            socket.write_all(answer.as_bytes()).await.unwrap();
            let text = String::from_utf8_lossy(&seen).to_lowercase();
            text.split("\r\n\r\n").next().unwrap_or_default().to_owned()
        });
        (url, served)
    }

    async fn invoke(headers: Vec<(String, String)>) -> String {
        let (url, served) = one_invoke().await;
        let config = aws_sdk_lambda::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(crate::http_client())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("AKID", "secret", None, None, "test"))
            .endpoint_url(url)
            .build();
        let invoker = LambdaInvoker { client: aws_sdk_lambda::Client::from_conf(config) };
        let delivery = Delivery {
            destination: Destination::Lambda("consumer".into()),
            headers,
            body: b"{}".to_vec(),
            timeout_ms: 5_000,
        };
        let answer = invoker.deliver(&delivery).await;
        assert!(matches!(answer, Answer::Status { status: 200, .. }), "{answer:?}");
        served.await.unwrap()
    }

    #[tokio::test]
    async fn given_a_traceparent_then_the_invoke_carries_it_as_the_xray_trace_header() {
        let traceparent = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01";
        let head = invoke(vec![("traceparent".into(), traceparent.into())]).await;
        let xray = "x-amzn-trace-id: root=1-5759e988-bd862e3fe1be46a994272793;parent=53995c3f42cd8ad8;sampled=1";
        assert!(head.lines().any(|l| l == xray), "no X-Ray header from the traceparent in:\n{head}");

        let head = invoke(Vec::new()).await;
        assert!(!head.contains("root=1-5759e988"), "a delivery without a trace context names none:\n{head}");
    }
}
