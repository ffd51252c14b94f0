//! `latency`: one client, one event per request, each awaited: the latency of a durable
//! publish, timed by the `publish` workload with a single client.

use std::time::Duration;

use crate::args::{LatencyArgs, PublishShape};
use crate::report::Report;
use crate::target::Target;
use crate::BoxError;

use super::publish::publish;

pub async fn run(t: &Target, a: LatencyArgs) -> Result<Report, BoxError> {
    let shape = PublishShape { event_size: a.event_size, batch: 1, keys: 1000 };
    let mut r = publish(t, shape, 1, Duration::from_secs(3600), a.count).await?;
    r.workload = "latency";
    Ok(r)
}
