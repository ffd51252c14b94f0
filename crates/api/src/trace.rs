//! A request's W3C trace context: its `traceparent` and `tracestate` headers, given to the
//! events a publish stores (see [`sluice_core::trace`]), and its trace id on the
//! handlers' spans so their logs can be found by trace.

use axum::http::HeaderMap;
use sluice_core::trace::{TraceContext, TraceParent, TRACEPARENT, TRACESTATE, XRAY_HEADER};

/// The request's trace context, as W3C asks a receiver to read it: `None` without a
/// single well-formed `traceparent` header (a malformed or repeated one is ignored, and
/// the events start no trace), and a malformed `tracestate` dropped. Several
/// `tracestate` lines are one list. Tracing never makes a publish fail.
pub(crate) fn request_context(headers: &HeaderMap) -> Option<TraceContext> {
    let mut parents = headers.get_all(TRACEPARENT).iter();
    let (Some(parent), None) = (parents.next(), parents.next()) else { return None };
    let states: Option<Vec<&str>> = headers.get_all(TRACESTATE).iter().map(|v| v.to_str().ok()).collect();
    let state = states.filter(|s| !s.is_empty()).map(|s| s.join(","));
    let context = TraceContext::lenient(parent.to_str().ok()?, state.as_deref());
    if context.is_none() {
        tracing::debug!(traceparent = ?parent, "malformed traceparent ignored");
    }
    context
}

/// The trace id to log the request under: its `traceparent`'s, else that of its X-Ray
/// trace header (on Lambda, the invocation's). Never an error: only for the logs.
pub(crate) fn trace_id(headers: &HeaderMap) -> Option<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let parent = header(TRACEPARENT).and_then(|t| TraceParent::parse(t).ok());
    let parent = parent.or_else(|| header(XRAY_HEADER).and_then(TraceParent::from_xray));
    parent.map(|p| p.trace_id().to_owned())
}
