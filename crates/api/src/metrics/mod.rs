//! Recording Sluice's metrics (named in [`sluice_core::metrics`]) from the HTTP layer:
//! every request by route and status, and what publishes, reads, receives and
//! settlements moved, per topic or subscription. [`sample`] sets the gauges read from
//! the store. Which recorder receives them is the process's choice: `serve` installs
//! the Prometheus exporter, the Lambda functions the CloudWatch EMF writer.

mod handles;
mod state;

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use metrics::counter;
use sluice_core::metrics as m;
use sluice_core::{Event, NewEvent};

pub use handles::keep_handles;
pub use state::{sample, Detail, SampleBounds, SampleReport};

use crate::ApiError;

/// The middleware of every router: counts each request by its route template (or
/// `unmatched`), method and status, and times it.
pub(crate) async fn track(request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    // Any token is a method to hyper: an unknown one is `other`, so clients cannot add labels.
    let method = match *request.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    let started = Instant::now();
    let response = next.run(request).await;
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let handles = handles::request(route, method, response.status().as_u16());
    handles.duration.record(started.elapsed().as_secs_f64());
    handles.requests.increment(1);
    response
}

/// Events handed out by `via` (`replay`, `group`, `queue`), each with its topic.
pub(crate) fn read<'a>(via: &'static str, events: impl IntoIterator<Item = (&'a str, &'a Event)>) {
    // (topic, events, bytes), in the order topics first appear: a page spans few topics.
    let mut per_topic: Vec<(&str, u64, u64)> = Vec::new();
    for (topic, e) in events {
        let r = &e.record;
        let size = payload_bytes(r.key.as_deref(), &r.headers, &r.value);
        match per_topic.iter_mut().find(|(t, _, _)| *t == topic) {
            Some((_, n, bytes)) => (*n, *bytes) = (*n + 1, *bytes + size),
            None => per_topic.push((topic, 1, size)),
        }
    }
    for (topic, n, bytes) in per_topic {
        counter!(m::EVENTS_READ, "topic" => topic.to_owned(), "via" => via).increment(n);
        counter!(m::BYTES_READ, "topic" => topic.to_owned(), "via" => via).increment(bytes);
    }
}

/// A publish to `topic`, known to exist, ended: acknowledged (`Ok`), or refused (the
/// caller leaves out refusals for topics that do not exist, so made-up names add no
/// label sets).
pub(crate) fn published(topic: &str, outcome: Result<&Stored, &ApiError>) {
    match outcome {
        Ok(stored) => {
            let handles = handles::published(topic);
            handles.requests.increment(1);
            handles.events.increment(stored.events);
            handles.bytes.increment(stored.bytes);
            handles.commit.record(stored.commit_seconds);
        }
        Err(e) => {
            let outcome = if e.status.is_server_error() { "failed" } else { "rejected" };
            counter!(m::PUBLISH_REQUESTS, "topic" => topic.to_owned(), "outcome" => outcome).increment(1);
        }
    }
}

/// The bytes of an event's key, header names and values, and value: what the byte
/// counters add, published and read alike.
fn payload_bytes(key: Option<&[u8]>, headers: &[(String, bytes::Bytes)], value: &[u8]) -> u64 {
    let headers: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    (key.map_or(0, <[u8]>::len) + headers + value.len()) as u64
}

/// What a publish had stored, and how long the log took to acknowledge it.
pub(crate) struct Stored {
    events: u64,
    bytes: u64,
    commit_seconds: f64,
}

impl Stored {
    /// The size of a valid batch, before it goes to the log.
    pub(crate) fn of(events: &[NewEvent]) -> Self {
        let bytes = events.iter().map(|e| payload_bytes(e.key.as_deref(), &e.headers, &e.value)).sum();
        Self { events: events.len() as u64, bytes, commit_seconds: 0.0 }
    }

    /// The same, acknowledged after `elapsed`.
    pub(crate) fn committed_in(self, elapsed: std::time::Duration) -> Self {
        Self { commit_seconds: elapsed.as_secs_f64(), ..self }
    }
}
