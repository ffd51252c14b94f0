//! The one place errors become HTTP responses: `{"error": {"code", "message"}}`.
//! Faults are logged with their sources; clients get a code, never internals.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use sluice_core::Error;

/// An error response: a status, a stable snake_case code, a message, and optional details.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    details: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), details: None }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let msg = e.to_string();
        match e {
            Error::Invalid { code, message } => Self::bad_request(code, message),
            Error::TooLarge { code, message } => Self::new(StatusCode::PAYLOAD_TOO_LARGE, code, message),
            Error::TopicNotFound(_) => Self::new(StatusCode::NOT_FOUND, "topic_not_found", msg),
            Error::PartitionNotFound { .. } => Self::new(StatusCode::NOT_FOUND, "partition_not_found", msg),
            Error::GroupNotFound(_) => Self::new(StatusCode::NOT_FOUND, "group_not_found", msg),
            Error::SubscriptionNotFound { .. } => Self::new(StatusCode::NOT_FOUND, "subscription_not_found", msg),
            Error::NotFound { code, message } => Self::new(StatusCode::NOT_FOUND, code, message),
            Error::Conflict { code, message } => Self::new(StatusCode::CONFLICT, code, message),
            Error::TopicExists(_) => Self::new(StatusCode::CONFLICT, "topic_exists", msg),
            Error::IdempotencyKeyReused(_) => Self::new(StatusCode::CONFLICT, "idempotency_key_reused", msg),
            Error::OffsetOutOfRange { log_start_offset, high_watermark, .. } => Self {
                details: Some(json!({ "log_start_offset": log_start_offset, "high_watermark": high_watermark })),
                ..Self::new(StatusCode::RANGE_NOT_SATISFIABLE, "offset_out_of_range", msg)
            },
            Error::Throttled(source) => {
                tracing::warn!(error = %source, "throttled");
                Self::new(StatusCode::TOO_MANY_REQUESTS, "throttled", msg)
            }
            Error::Corrupt(detail) => {
                tracing::error!(%detail, "corrupt data");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
            }
            Error::Unavailable(source) => {
                tracing::error!(error = %source, cause = ?std::error::Error::source(&source), "storage unavailable");
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "storage unavailable, retry later")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let (Some(Value::Object(extra)), Some(obj)) = (self.details, error.as_object_mut()) {
            obj.extend(extra);
        }
        let mut response = (self.status, axum::Json(json!({ "error": error }))).into_response();
        if matches!(self.status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
