//! CloudWatch EMF for a Lambda function: installs the recorder, which writes the metrics
//! recorded during invocations as EMF lines on stdout, in the namespace
//! `SLUICE_METRICS_NAMESPACE` (default `Sluice`): after every run for the janitor and the
//! dispatcher ([`run_service`]), and as `SLUICE_METRICS_FLUSH_MS` says for the HTTP
//! functions ([`run_http`], [`crate::metrics::flush`]).

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use lambda_http::lambda_runtime::{LambdaInvocation, Runtime};
use lambda_http::tower::{Layer, Service};
pub use metrics_cloudwatch_embedded::lambda::service::run as run_service;
use metrics_cloudwatch_embedded::Collector;
use sluice_core::{Clock, SystemClock};

use super::flush::{FlushPolicy, Pending};

/// The HTTP functions' default: one write per 10 s (or 32 invocations) per instance.
pub const DEFAULT_FLUSH_MS: u64 = 10_000;

/// Installs the EMF recorder once per process.
pub fn collector() -> Result<&'static Collector, lambda_http::Error> {
    let namespace = std::env::var("SLUICE_METRICS_NAMESPACE").unwrap_or_else(|_| "Sluice".to_owned());
    let collector = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(namespace)
        .with_lambda_request_id("RequestId")
        .init()?;
    sluice_core::metrics::describe();
    sluice_api::metrics::keep_handles();
    Ok(collector)
}

/// `SLUICE_METRICS_FLUSH_MS`: milliseconds between an HTTP function's metric writes (0:
/// after every invocation, each document carrying its `RequestId`); unset or empty:
/// [`DEFAULT_FLUSH_MS`].
pub fn flush_policy(value: Option<&str>) -> Result<FlushPolicy, String> {
    let every_ms = match value {
        Some(v) if !v.is_empty() => v.parse().map_err(|e| format!("SLUICE_METRICS_FLUSH_MS={v:?}: {e}"))?,
        _ => DEFAULT_FLUSH_MS,
    };
    Ok(FlushPolicy::every(every_ms))
}

/// Time kept back from an invocation's deadline for the answer: the longest an AWS
/// request may take, its retries included, and a second to send the answer. A publish
/// that starts no request after its [`sluice_api::Deadline`] thus answers before the
/// function is stopped.
const ANSWER_RESERVE_MS: i64 = sluice_aws::Deadlines::AWS.operation.as_millis() as i64 + 1000;

/// Runs an HTTP function (an API router) under lambda_http, writing its metrics as
/// `SLUICE_METRICS_FLUSH_MS` says. Each request carries its invocation's
/// [`sluice_api::Deadline`].
pub async fn run_http(router: axum::Router) -> Result<(), lambda_http::Error> {
    let router = router.layer(axum::middleware::map_request(with_deadline));
    let policy = flush_policy(std::env::var("SLUICE_METRICS_FLUSH_MS").ok().as_deref())?;
    let layer = FlushLayer::new(collector()?, policy, Arc::new(SystemClock), Arc::new(to_stdout));
    Runtime::new(lambda_http::Adapter::from(router)).layer(layer).run().await
}

/// Adds the deadline of the invocation that carries `request` (lambda_http puts its
/// context in the extensions).
async fn with_deadline(mut request: axum::extract::Request) -> axum::extract::Request {
    if let Some(context) = request.extensions().get::<lambda_http::Context>() {
        let now_ms = SystemClock.now_ms();
        let deadline = crate::invocation_deadline_ms(context.deadline, now_ms) - ANSWER_RESERVE_MS;
        request.extensions_mut().insert(sluice_api::Deadline(deadline));
    }
    request
}

/// Where written documents go: stdout on Lambda, a buffer in tests.
type Sink = Arc<dyn Fn(&[u8]) + Send + Sync>;

fn to_stdout(documents: &[u8]) {
    if let Err(error) = std::io::stdout().lock().write_all(documents) {
        tracing::warn!(%error, "metrics not written");
    }
}

/// Writes the collector's metrics at the end of the invocations its policy names.
pub struct FlushLayer(Arc<Flusher>);

struct Flusher {
    collector: &'static Collector,
    policy: FlushPolicy,
    pending: Mutex<Pending>,
    clock: Arc<dyn Clock>,
    sink: Sink,
}

impl FlushLayer {
    pub fn new(collector: &'static Collector, policy: FlushPolicy, clock: Arc<dyn Clock>, sink: Sink) -> Self {
        Self(Arc::new(Flusher { collector, policy, pending: Mutex::default(), clock, sink }))
    }
}

impl<S> Layer<S> for FlushLayer {
    type Service = FlushService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FlushService { flusher: self.0.clone(), inner }
    }
}

impl Flusher {
    /// An invocation ended: writes what was recorded if the policy says it is time (and
    /// if the pending count cannot be read, as the safe side).
    fn ended(&self) {
        let due = match self.pending.lock() {
            Ok(mut pending) => self.policy.due(&mut pending, self.clock.now_ms()),
            Err(_) => true,
        };
        if due {
            let mut documents = Vec::new();
            match self.collector.flush(&mut documents) {
                Ok(()) => (self.sink)(&documents),
                Err(error) => tracing::warn!(%error, "metrics not written"),
            }
        }
    }
}

pub struct FlushService<S> {
    flusher: Arc<Flusher>,
    inner: S,
}

impl<S: Service<LambdaInvocation>> Service<LambdaInvocation> for FlushService<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = Flushing<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: LambdaInvocation) -> Self::Future {
        // A document covering many invocations names none of them.
        if self.flusher.policy.every_ms == 0 {
            self.flusher.collector.set_property("RequestId", req.context.request_id.clone());
        }
        Flushing { flusher: self.flusher.clone(), inner: Box::pin(self.inner.call(req)) }
    }
}

/// An invocation under way; writes the metrics when it ends, if due.
pub struct Flushing<F> {
    flusher: Arc<Flusher>,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for Flushing<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let output = std::task::ready!(self.inner.as_mut().poll(cx));
        self.flusher.ended();
        Poll::Ready(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn given_an_invocation_then_its_requests_carry_its_deadline_less_the_reserve() {
        let mut context = lambda_http::Context::default();
        context.deadline = 1_796_225_545_000;
        let mut request = axum::extract::Request::new(axum::body::Body::empty());
        request.extensions_mut().insert(context);
        let request = with_deadline(request).await;
        let deadline = request.extensions().get::<sluice_api::Deadline>().copied();
        assert_eq!(deadline, Some(sluice_api::Deadline(1_796_225_545_000 - 11_000)));
        let bare = with_deadline(axum::extract::Request::new(axum::body::Body::empty())).await;
        assert_eq!(bare.extensions().get::<sluice_api::Deadline>(), None, "outside Lambda: no deadline");
    }
}
