//! The one place errors become HTTP responses: `{"error": {"code", "message"}}`.
//! Faults are logged with their sources; clients get a code, never internals.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use sluice_core::{Code, Error};

/// An error response: a status, a stable snake_case code, a message, and optional details.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: Code,
    pub message: String,
    details: Option<Value>,
}

impl ApiError {
    /// An error with `code`, answered with the code's status.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        let status = StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self { status, code, message: message.into(), details: None }
    }

    /// An error with one of the `400` codes.
    pub fn bad_request(code: Code, message: impl Into<String>) -> Self {
        Self::new(code, message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let msg = e.to_string();
        match e {
            Error::Invalid { code, message } => Self::bad_request(code, message),
            Error::TooLarge { code, message } => Self::new(code, message),
            Error::TopicNotFound(_) => Self::new(Code::TopicNotFound, msg),
            Error::PartitionNotFound { .. } => Self::new(Code::PartitionNotFound, msg),
            Error::GroupNotFound(_) => Self::new(Code::GroupNotFound, msg),
            Error::SubscriptionNotFound { .. } => Self::new(Code::SubscriptionNotFound, msg),
            Error::NotFound { code, message } => Self::new(code, message),
            Error::Conflict { code, message } => Self::new(code, message),
            Error::TopicExists(_) => Self::new(Code::TopicExists, msg),
            Error::IdempotencyKeyReused(_) => Self::new(Code::IdempotencyKeyReused, msg),
            Error::OffsetOutOfRange { log_start_offset, high_watermark, .. } => Self {
                details: Some(json!({ "log_start_offset": log_start_offset, "high_watermark": high_watermark })),
                ..Self::new(Code::OffsetOutOfRange, msg)
            },
            Error::Throttled(source) => {
                tracing::warn!(error = %source, "throttled");
                Self::new(Code::Throttled, msg)
            }
            Error::Corrupt(detail) => {
                tracing::error!(%detail, "corrupt data");
                Self::new(Code::Internal, "internal error")
            }
            Error::Unavailable(source) => {
                tracing::error!(error = %source, cause = ?std::error::Error::source(&source), "storage unavailable");
                Self::new(Code::Unavailable, "storage unavailable, retry later")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({ "code": self.code.as_str(), "message": self.message });
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// docs/API.md's table of errors lists exactly the codes the server answers, each
    /// under the status it is answered with.
    #[test]
    fn the_api_docs_list_exactly_the_error_codes() {
        let doc = include_str!("../../../docs/API.md");
        let section = doc.split_once("## Errors").map(|(_, rest)| rest).unwrap_or_default();
        let section = section.split_once("\n## ").map_or(section, |(errors, _)| errors);
        let mut listed = BTreeSet::new();
        for line in section.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let Some(status) = cells.get(1).and_then(|s| s.parse::<u16>().ok()) else { continue };
            for code in cells[2].split(',').map(|c| c.trim().trim_matches('`')) {
                listed.insert((code.to_owned(), status));
            }
        }
        let answered: BTreeSet<(String, u16)> = Code::ALL.iter().map(|c| (c.as_str().to_owned(), c.status())).collect();
        let missing: Vec<_> = answered.difference(&listed).collect();
        let extra: Vec<_> = listed.difference(&answered).collect();
        assert!(missing.is_empty() && extra.is_empty(), "not in API.md: {missing:?}; not answered: {extra:?}");
    }

    #[test]
    fn every_code_answers_its_own_status() {
        for &code in Code::ALL {
            assert_eq!(ApiError::new(code, "m").status.as_u16(), code.status(), "{code}");
        }
    }
}
