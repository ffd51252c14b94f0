//! A request's W3C trace context: its `traceparent` and `tracestate` headers, given to the
//! events a publish stores (see [`sluice_core::trace`]), and its trace id on the
//! handlers' spans so their logs can be found by trace.

use axum::http::HeaderMap;
use sluice_core::trace::{TraceContext, TraceParent, TRACEPARENT, TRACESTATE, XRAY_HEADER};
use sluice_core::Code;

use crate::ApiError;

/// The request's trace context: `None` without a `traceparent` header (a `tracestate`
/// alone means nothing); `400 invalid_request` if either is malformed, or if
/// `traceparent` is sent twice. Several `tracestate` lines are one list, as W3C says.
pub(crate) fn request_context(headers: &HeaderMap) -> Result<Option<TraceContext>, ApiError> {
    let invalid = |message: String| ApiError::bad_request(Code::InvalidRequest, message);
    let text = |name: &str| -> Result<Vec<&str>, ApiError> {
        let values = headers.get_all(name).iter().map(|v| v.to_str());
        values.collect::<Result<_, _>>().map_err(|_| invalid(format!("the {name} header is not visible ASCII")))
    };
    let parents = text(TRACEPARENT)?;
    let parent = match parents[..] {
        [] => return Ok(None),
        [one] => one,
        _ => return Err(invalid("the traceparent header is sent more than once".into())),
    };
    let states = text(TRACESTATE)?;
    let state = (!states.is_empty()).then(|| states.join(","));
    TraceContext::parse(parent, state.as_deref())
        .map(Some)
        .map_err(|e| invalid(format!("the {TRACEPARENT} and {TRACESTATE} headers: {e}")))
}

/// The trace id to log the request under: its `traceparent`'s, else that of its X-Ray
/// trace header (on Lambda, the invocation's). Never an error: only for the logs.
pub(crate) fn trace_id(headers: &HeaderMap) -> Option<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let parent = header(TRACEPARENT).and_then(|t| TraceParent::parse(t).ok());
    let parent = parent.or_else(|| header(XRAY_HEADER).and_then(TraceParent::from_xray));
    parent.map(|p| p.trace_id().to_owned())
}
