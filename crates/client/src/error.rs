//! What a call can fail with: the API's own answer (its status, code and message), or
//! the way to it (connection, timeout, signing), or an answer that is not the API's.

use sluice_wire::Code;

/// An error of a client call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Sluice answered with an error: `{"error": {"code", "message", …}}`.
    #[error("{status} {code}: {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The API's error code, as documented (`topic_not_found`, `stale_generation`, …).
        code: String,
        /// What went wrong, for people; it may change between versions.
        message: String,
        /// The whole error object, for the codes that carry more fields
        /// (`offset_out_of_range` carries `log_start_offset` and `high_watermark`).
        details: serde_json::Value,
    },
    /// Something other than Sluice answered, or the answer could not be read as the API's:
    /// on AWS, API Gateway's own `403` for a bad signature, for instance.
    #[error("unexpected answer {status}: {body}")]
    Unexpected {
        /// The HTTP status.
        status: u16,
        /// The answer's `content-type`, if it had one (`text/html` from a web server that
        /// is not Sluice, for instance).
        content_type: Option<String>,
        /// The start of the body, as text.
        body: String,
    },
    /// The request did not get an answer: connecting failed, or it timed out.
    #[error("request failed: {0}")]
    Transport(std::sync::Arc<reqwest::Error>),
    /// The request could not be signed (AWS credentials missing or unusable).
    #[error("signing failed: {0}")]
    Signing(String),
    /// An argument the client refuses before sending anything.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The producer or consumer was shut down while the call waited.
    #[error("the client was closed")]
    Closed,
}

impl From<reqwest::Error> for Error {
    fn from(error: reqwest::Error) -> Self {
        Error::Transport(std::sync::Arc::new(error))
    }
}

impl Error {
    /// The API's error code, parsed, when Sluice answered with one this client knows.
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Api { code, .. } => Code::ALL.iter().copied().find(|c| c.as_str() == code),
            _ => None,
        }
    }

    /// The HTTP status of an answer, if there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::Unexpected { status, .. } => Some(*status),
            Error::Transport(e) => e.status().map(|s| s.as_u16()),
            _ => None,
        }
    }

    /// Whether sending the same request again may succeed: the server was busy (`429`,
    /// `503`, a gateway's `502`/`504`) or no answer came. Whether it is *safe* to send it
    /// again is the caller's to know (see the crate's notes on retries).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport(_) => true,
            Error::Api { status, .. } | Error::Unexpected { status, .. } => matches!(status, 429 | 502 | 503 | 504),
            _ => false,
        }
    }
}

/// Reads an error answer: the API's JSON error if it is one, else [`Error::Unexpected`].
pub(crate) fn from_answer(status: u16, content_type: Option<String>, body: &[u8]) -> Error {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    match error.and_then(|e| Some((e.get("code")?.as_str()?, e.get("message")?.as_str()?))) {
        Some((code, message)) => Error::Api {
            status,
            code: code.to_owned(),
            message: message.to_owned(),
            details: error.cloned().unwrap_or_default(),
        },
        None => {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
            Error::Unexpected { status, content_type, body: text }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_an_api_error_body_then_its_code_is_typed() {
        let body = br#"{"error":{"code":"offset_out_of_range","message":"m","log_start_offset":3,"high_watermark":9}}"#;
        let error = from_answer(416, None, body);
        assert_eq!(error.code(), Some(Code::OffsetOutOfRange));
        assert_eq!(error.status(), Some(416));
        assert!(!error.is_transient());
        let Error::Api { details, .. } = error else { panic!("not an API error") };
        assert_eq!(details["log_start_offset"], 3);
    }

    #[test]
    fn given_a_gateway_answer_then_unexpected_and_busy_ones_are_transient() {
        let error = from_answer(403, None, b"{\"message\":\"Forbidden\"}");
        assert!(matches!(error, Error::Unexpected { status: 403, .. }));
        assert!(!error.is_transient());
        assert!(from_answer(503, Some("text/html".into()), b"<html>").is_transient());
        assert!(from_answer(429, None, br#"{"error":{"code":"throttled","message":"m"}}"#).is_transient());
    }
}
