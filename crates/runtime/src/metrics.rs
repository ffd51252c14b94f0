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

pub mod flush;

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

// CloudWatch EMF for a Lambda function (the `aws` feature).
#[cfg(feature = "aws")]
pub mod emf;
