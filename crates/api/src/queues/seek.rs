//! `POST …/{sub}/seek` and `POST …/{sub}/purge`: move a subscription's queue.

use axum::body::Body;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sluice_core::queues::{Queues, SeekTo, Sought};
use sluice_core::Code;

use crate::body::{parse_object, read_body};
use crate::openapi::params::SubPath as SubParams;
use crate::openapi::{answers, errors, examples as ex};
use crate::path::Path;
use crate::ApiError;

use super::{parse_optional, SubPath, MAX_BODY};

/// The body purge takes: none, or `{}`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct NoFields {}

/// The core's target for the wire's `to`; any other shape is `invalid_seek`.
fn target(to: Value) -> Result<SeekTo, ApiError> {
    let to: answers::SeekTo = serde_json::from_value(to).map_err(|e| {
        let shapes = r#""earliest", "latest", {"timestamp_ms": N} or {"offsets": [o0, o1, …]}"#;
        ApiError::bad_request(Code::InvalidSeek, format!("\"to\" must be {shapes}: {e}"))
    })?;
    Ok(match to {
        answers::SeekTo::Earliest => SeekTo::Earliest,
        answers::SeekTo::Latest => SeekTo::Latest,
        answers::SeekTo::Timestamp(ts) => SeekTo::Timestamp(ts),
        answers::SeekTo::Offsets(offsets) => SeekTo::Offsets(offsets),
    })
}

fn sought_json(s: &Sought) -> Json<Value> {
    let partitions: Vec<Value> = s
        .partitions
        .iter()
        .map(|p| json!({ "partition": p.partition, "from": p.from, "to": p.to, "redeliver": p.redeliver, "skip": p.skip }))
        .collect();
    Json(json!({ "applied": s.applied, "redeliver": s.redeliver, "skip": s.skip, "partitions": partitions }))
}

/// Move every partition's queue to `to` (see docs/API.md): messages before it are passed
/// over, messages from it on delivered again as new; every lease ends. With `dry_run`,
/// nothing changes and the answer is what the seek would do now.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/seek", tag = "queues",
    operation_id = "seekSubscription", params(SubParams),
    request_body(content = answers::SeekSubscription, example = ex::seek_subscription),
    responses((status = 200, description = "How many messages come back and how many are passed over",
        body = answers::SeekOutcome, example = ex::subscription_sought), errors::SeekSubscription))]
pub async fn seek(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let req: answers::SeekSubscription = parse_object(&read_body(body, MAX_BODY).await?)?;
    let to = target(req.to)?;
    Ok(sought_json(&queues.seek(&topic, &sub, &to, req.dry_run).await?))
}

/// Purge a subscription's queue: a seek to `latest`. Its dead letters stay.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/purge", tag = "queues",
    operation_id = "purgeSubscription", params(SubParams),
    responses((status = 200, description = "How many messages were passed over", body = answers::SeekOutcome,
        example = ex::subscription_purged), errors::ChangeState))]
pub async fn purge(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let _: NoFields = parse_optional(&read_body(body, MAX_BODY).await?)?;
    Ok(sought_json(&queues.purge(&topic, &sub).await?))
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};

    use super::super::tests::{call, given_a_queue_with_three_messages, snapshot, SUB};

    #[tokio::test]
    async fn given_bad_seeks_then_each_is_its_4xx_json_error_and_nothing_changes() {
        let (app, _dir) = given_a_queue_with_three_messages().await;
        let before = snapshot(&app).await;
        let (seek, purge) = (format!("{SUB}/seek"), format!("{SUB}/purge"));
        // Partition 1 holds 3 events, partition 0 none.
        let cases = [
            (&seek, r#"{"to": "middle"}"#, StatusCode::BAD_REQUEST, "invalid_seek"),
            (&seek, r#"{"to": {"offsets": [0]}}"#, StatusCode::BAD_REQUEST, "invalid_seek"),
            (&seek, r#"{"to": {"offsets": [0, 4]}}"#, StatusCode::BAD_REQUEST, "invalid_seek"),
            (&seek, r#"{"to": {"offset": 1}}"#, StatusCode::BAD_REQUEST, "invalid_seek"),
            (&seek, r#"{"dry_run": true}"#, StatusCode::BAD_REQUEST, "invalid_request"),
            (&seek, r#"{"to": "latest", "now": 1}"#, StatusCode::BAD_REQUEST, "invalid_request"),
            (&seek, "{", StatusCode::BAD_REQUEST, "invalid_json"),
            (&purge, r#"{"dlq": false}"#, StatusCode::BAD_REQUEST, "invalid_request"),
        ];
        for (path, body, status, code) in cases {
            let (got, answer) = call(&app, Method::POST, path, Some(body)).await;
            assert_eq!((got, answer["error"]["code"].as_str()), (status, Some(code)), "{path} {body}: {answer}");
        }
        let other = "/v1/topics/jobs/subscriptions/other/seek";
        let (got, answer) = call(&app, Method::POST, other, Some(r#"{"to": "latest"}"#)).await;
        assert_eq!((got, answer["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("subscription_not_found")));
        let (got, dry) = call(&app, Method::POST, &seek, Some(r#"{"to": "latest", "dry_run": true}"#)).await;
        assert_eq!(got, StatusCode::OK);
        assert_eq!((dry["applied"].as_bool(), dry["skip"].as_u64()), (Some(false), Some(3)), "{dry}");
        assert_eq!(snapshot(&app).await, before, "a refused seek or a dry run changed state");
    }
}
