//! `POST …/{sub}/secret`: rotate a push subscription's signing secret.

use axum::body::Body;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};
use sluice_core::queues::{Queues, SecretRotation};

use crate::body::read_body;
use crate::openapi::params::SubPath as SubParams;
use crate::openapi::{answers, errors, examples as ex};
use crate::path::Path;
use crate::ApiError;

use super::{parse_optional, SubPath, MAX_BODY};

/// Rotate a push subscription's signing secret (see docs/API.md): the new one (given, or
/// generated without a body) is answered here only; the old one keeps signing beside it,
/// every delivery carrying both signatures, until `previous_expires_ms`.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/secret", tag = "queues",
    operation_id = "rotateSecret", params(SubParams),
    request_body(content = answers::RotateSecret, example = ex::rotate_secret),
    responses((status = 200, description = "The new secret, shown only here, and when the old one stops signing",
        body = answers::SecretRotated, example = ex::secret_rotated), errors::RotateSecret))]
pub async fn rotate_secret(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let req: answers::RotateSecret = parse_optional(&read_body(body, MAX_BODY).await?)?;
    let rotation = SecretRotation { secret: req.secret, overlap_ms: req.overlap_ms };
    let rotated = queues.rotate_secret(&topic, &sub, &rotation).await?;
    Ok(Json(json!({ "secret": rotated.secret, "previous_expires_ms": rotated.previous_expires_ms })))
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};
    use serde_json::json;

    use super::super::tests::{call, given_a_queue_with_three_messages, snapshot, SUB};

    const HOOK: &str = "/v1/topics/jobs/subscriptions/hook";
    const KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[tokio::test]
    async fn given_bad_rotations_then_each_is_its_4xx_json_error_and_nothing_changes() {
        let (app, _dir) = given_a_queue_with_three_messages().await;
        let create = json!({ "push": { "url": "https://receiver.test/hook", "secret": KEY } }).to_string();
        assert_eq!(call(&app, Method::PUT, HOOK, Some(&create)).await.0, StatusCode::CREATED);
        let described = || async { call(&app, Method::GET, HOOK, None).await.1["push"].clone() };
        let (before, pull_before) = (described().await, snapshot(&app).await);
        let (hook, pull) = (format!("{HOOK}/secret"), format!("{SUB}/secret"));
        let cases = [
            (&hook, r#"{"secret": "abc"}"#, StatusCode::BAD_REQUEST, "invalid_push"),
            (&hook, r#"{"secret": "whsec_AAAA"}"#, StatusCode::BAD_REQUEST, "invalid_push"),
            (&hook, r#"{"overlap_ms": 604800001}"#, StatusCode::BAD_REQUEST, "invalid_push"),
            (&hook, r#"{"overlap_ms": -1}"#, StatusCode::BAD_REQUEST, "invalid_request"),
            (&hook, r#"{"overlap": 1}"#, StatusCode::BAD_REQUEST, "invalid_request"),
            (&hook, r#"{"secret": 5}"#, StatusCode::BAD_REQUEST, "invalid_request"),
            (&hook, "{", StatusCode::BAD_REQUEST, "invalid_json"),
            (&pull, "", StatusCode::BAD_REQUEST, "invalid_request"),
        ];
        for (path, body, status, code) in cases {
            let (got, answer) = call(&app, Method::POST, path, Some(body)).await;
            assert_eq!((got, answer["error"]["code"].as_str()), (status, Some(code)), "{path} {body}: {answer}");
        }
        let other = "/v1/topics/jobs/subscriptions/other/secret";
        let (got, answer) = call(&app, Method::POST, other, None).await;
        assert_eq!((got, answer["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("subscription_not_found")));
        assert_eq!(described().await, before, "a refused rotation changed the push subscription");
        assert_eq!(snapshot(&app).await, pull_before, "a refused rotation changed the pull subscription");
        assert!(before.get("previous_secret_expires_ms").is_none(), "never rotated: {before}");

        let (got, rotated) = call(&app, Method::POST, &hook, None).await;
        assert_eq!(got, StatusCode::OK, "{rotated}");
        let secret = rotated["secret"].as_str().unwrap();
        assert!(secret.starts_with("whsec_") && secret != KEY, "{rotated}");
        let expires = rotated["previous_expires_ms"].as_i64().unwrap();
        assert_eq!(described().await["previous_secret_expires_ms"], json!(expires), "describe shows the overlap");
        assert!(described().await.get("secret").is_none(), "describe never shows a secret");
    }
}
