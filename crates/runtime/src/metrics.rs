//! Where the metrics go. `serve` answers `GET /metrics` in Prometheus's text format,
//! sampling the store's gauges on each scrape; the Lambda functions (the `aws` feature)
//! write the same metrics in CloudWatch's Embedded Metric Format after each invocation.

use std::sync::OnceLock;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use sluice_api::metrics::{sample, Detail, SampleBounds};
use sluice_api::{ApiError, App};
use tokio::sync::Mutex;

/// A gauge no sample has set for this long (what a deleted topic, group or
/// subscription left) is dropped from the output.
const GAUGE_IDLE: Duration = Duration::from_secs(300);

/// The process's Prometheus recorder, installed on first use. If another recorder was
/// installed first, the handle renders nothing and says so in the log.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&sluice_core::metrics::SECONDS_BUCKETS)
            .expect("the buckets are not empty")
            .idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE))
            .build_recorder();
        let handle = recorder.handle();
        match metrics::set_global_recorder(recorder) {
            Ok(()) => {
                sluice_core::metrics::describe();
                sluice_api::metrics::keep_handles();
            }
            Err(e) => tracing::warn!(error = %e, "another metrics recorder is installed: /metrics stays empty"),
        }
        handle
    })
}

/// `GET /metrics`: the counters and histograms of this process, and the gauges of the
/// store, sampled now within [`SampleBounds::default`] (one sample at a time: concurrent
/// scrapes take turns rather than read the store at once).
pub fn router(app: App) -> Router {
    prometheus();
    let scraping = std::sync::Arc::new(Mutex::new(()));
    Router::new().route("/metrics", get(scrape)).with_state((app, scraping))
}

async fn scrape(State((app, scraping)): State<(App, std::sync::Arc<Mutex<()>>)>) -> Result<Response, ApiError> {
    let _one = scraping.lock().await;
    sample(&app, Detail::Partition, SampleBounds::default()).await?;
    let text = prometheus().render();
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

/// CloudWatch EMF for a Lambda function: installs the recorder, which writes every
/// metric recorded during an invocation as EMF lines on stdout when it ends, in the
/// namespace `SLUICE_METRICS_NAMESPACE` (default `Sluice`).
#[cfg(feature = "aws")]
pub mod emf {
    pub use metrics_cloudwatch_embedded::lambda::service::run as run_service;
    use metrics_cloudwatch_embedded::Collector;

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

    /// Time kept back from an invocation's deadline for the answer: the longest an AWS
    /// request may take, its retries included, and a second to send the answer. A publish
    /// that starts no request after its [`sluice_api::Deadline`] thus answers before the
    /// function is stopped.
    const ANSWER_RESERVE_MS: i64 = sluice_aws::Deadlines::AWS.operation.as_millis() as i64 + 1000;

    /// Runs an HTTP function (an API router) under lambda_http, flushing its metrics
    /// after each invocation. Each request carries its invocation's [`sluice_api::Deadline`].
    pub async fn run_http(router: axum::Router) -> Result<(), lambda_http::Error> {
        let router = router.layer(axum::middleware::map_request(with_deadline));
        metrics_cloudwatch_embedded::lambda::service::run_http(collector()?, router).await
    }

    /// Adds the deadline of the invocation that carries `request` (lambda_http puts its
    /// context in the extensions).
    async fn with_deadline(mut request: axum::extract::Request) -> axum::extract::Request {
        if let Some(context) = request.extensions().get::<lambda_http::Context>() {
            let now_ms = sluice_core::Clock::now_ms(&sluice_core::SystemClock);
            let deadline = crate::invocation_deadline_ms(context.deadline, now_ms) - ANSWER_RESERVE_MS;
            request.extensions_mut().insert(sluice_api::Deadline(deadline));
        }
        request
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
}
