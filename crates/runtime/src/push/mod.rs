//! The push port's adapter ([`Deliver`]): webhook deliveries over HTTP(S) with reqwest, and
//! Lambda targets through a Lambda Invoke API endpoint (`cargo lambda watch`'s locally).
//! Redirects are not followed, no proxy is used (`HTTP_PROXY` would connect past the
//! guard), the answer is read up to [`MAX_ANSWER_BYTES`], and unless private destinations
//! are allowed, a URL whose host is (or resolves to) a non-public address ([`guard`]) is
//! refused: names are resolved once, by a resolver that drops such addresses, and the
//! connection uses what it checked.

pub mod guard;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use sluice_core::ports::deliver::{Answer, Deliver, Delivery, Destination, MAX_ANSWER_BYTES};
use sluice_core::{Clock, SystemClock};

/// What a process without a Lambda endpoint (`serve` without `--lambda-endpoint`) says of
/// Lambda targets: it cannot invoke them, so their subscriptions are refused at create
/// rather than failing every attempt.
pub struct NoLambdaEndpoint;

#[async_trait]
impl sluice_core::ports::deliver::Targets for NoLambdaEndpoint {
    async fn lambda_timeout_ms(&self, _: &str) -> Result<u64, sluice_core::ports::deliver::TargetError> {
        Err(sluice_core::ports::deliver::TargetError::Unsupported(
            "this server has no Lambda endpoint to invoke functions with: start `sluice serve` with \
             --lambda-endpoint URL (or SLUICE_LAMBDA_ENDPOINT), e.g. http://127.0.0.1:9000 for `cargo lambda watch`"
                .into(),
        ))
    }
}

/// Sends deliveries over HTTP.
pub struct HttpDeliverer {
    client: reqwest::Client,
    /// Where Lambda targets are invoked (`…/2015-03-31/functions/{name}/invocations`).
    lambda_endpoint: Option<String>,
    /// Lambda targets go here instead, when set (the AWS SDK's signed invocations).
    lambda: Option<Arc<dyn Deliver>>,
    allow_private: bool,
}

impl HttpDeliverer {
    /// `allow_private`: deliver to loopback and private addresses too (a developer's
    /// `localhost:3000`); `lambda_endpoint`: a Lambda Invoke API's base URL.
    pub fn new(allow_private: bool, lambda_endpoint: Option<String>) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(5));
        if !allow_private {
            builder = builder.dns_resolver(Arc::new(guard::PublicOnly));
        }
        Ok(Self { client: builder.build()?, lambda_endpoint, lambda: None, allow_private })
    }

    /// Hands deliveries to Lambda targets to `lambda`.
    pub fn with_lambda(self, lambda: Arc<dyn Deliver>) -> Self {
        Self { lambda: Some(lambda), ..self }
    }

    fn request(&self, delivery: &Delivery) -> Result<reqwest::RequestBuilder, String> {
        let url = match &delivery.destination {
            Destination::Url(url) => {
                let parsed = reqwest::Url::parse(url).map_err(|e| format!("bad url: {e}"))?;
                if !self.allow_private {
                    guard::refuse_private_literal(&parsed)?;
                }
                parsed
            }
            Destination::Lambda(function) => {
                let Some(base) = &self.lambda_endpoint else {
                    return Err("no Lambda endpoint is configured (SLUICE_LAMBDA_ENDPOINT)".into());
                };
                let url = format!("{}/2015-03-31/functions/{function}/invocations", base.trim_end_matches('/'));
                reqwest::Url::parse(&url).map_err(|e| format!("bad Lambda endpoint: {e}"))?
            }
        };
        let mut headers = HeaderMap::new();
        for (name, value) in &delivery.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| e.to_string())?;
            headers.insert(name, HeaderValue::from_str(value).map_err(|e| e.to_string())?);
        }
        Ok(self
            .client
            .post(url)
            .headers(headers)
            .body(delivery.body.clone())
            .timeout(Duration::from_millis(delivery.timeout_ms)))
    }
}

#[async_trait]
impl Deliver for HttpDeliverer {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        if let (Destination::Lambda(_), Some(lambda)) = (&delivery.destination, &self.lambda) {
            return lambda.deliver(delivery).await;
        }
        let request = match self.request(delivery) {
            Ok(r) => r,
            Err(reason) => return Answer::Failed(reason),
        };
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => return failed(&e),
        };
        let mut status = response.status().as_u16();
        // A Lambda function's own error comes back as 200 with this header.
        if response.headers().contains_key("x-amz-function-error") {
            status = 502;
        }
        let retry_after_ms = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after_ms(v, SystemClock.now_ms()));
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_ANSWER_BYTES - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() >= MAX_ANSWER_BYTES {
                        break;
                    }
                }
                Ok(None) => break,
                // The answer stopped (or timed out) before its end: the attempt failed.
                Err(e) => return failed(&e),
            }
        }
        Answer::Status { status, retry_after_ms, body }
    }
}

/// A `Retry-After` value as milliseconds from `now_ms`: seconds, or an HTTP date (RFC 9110:
/// IMF-fixdate, or the obsolete RFC 850 and asctime forms), read against this process's
/// wall clock as the receiver wrote it against its own; a date already past is 0. The
/// dispatcher caps what it honours (`sluice_core::push::flow::MAX_RETRY_AFTER_MS`).
pub fn retry_after_ms(value: &str, now_ms: i64) -> Option<u64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at_ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    Some(u64::try_from(at_ms.saturating_sub(u128::try_from(now_ms.max(0)).ok()?)).unwrap_or(u64::MAX))
}

/// A failed request as the dispatcher judges it: out of time, or failed for a reason.
fn failed(e: &reqwest::Error) -> Answer {
    if e.is_timeout() {
        return Answer::TimedOut;
    }
    Answer::Failed(if e.is_connect() {
        // The innermost cause: the guard's refusal, or the socket's error.
        let mut cause: &dyn std::error::Error = e;
        while let Some(inner) = cause.source() {
            cause = inner;
        }
        format!("could not connect: {cause}")
    } else {
        e.to_string()
    })
}

#[cfg(test)]
mod tests;
