//! Topic administration: create (idempotent), list, describe, delete.

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};
use sluice_core::{Log, PartitionState, TopicConfig, TopicSpec};

use crate::body::{parse_object_ranged, read_body};
use crate::openapi::answers::{CreateTopic, Topic, TopicDescription, TopicList};
use crate::openapi::params::TopicPath;
use crate::openapi::{errors, examples as ex};
use crate::path::Path;
use crate::{ApiError, Deadline};

fn topic_json(t: &TopicConfig) -> Value {
    json!({
        "name": t.name,
        "partitions": t.spec.partitions,
        "retention_ms": t.spec.retention_ms,
        "retention_bytes": t.spec.retention_bytes,
        "created_ms": t.created_ms,
    })
}

/// Create a topic (idempotent): `201` when new, `200` when it exists with exactly these settings.
#[utoipa::path(put, path = "/v1/topics/{topic}", tag = "topics", operation_id = "createTopic", params(TopicPath),
    request_body(content = Option<CreateTopic>, example = ex::create_topic),
    responses((status = 201, description = "Created", body = Topic, example = ex::topic),
        (status = 200, description = "It existed with these settings", body = Topic), errors::CreateTopic))]
pub async fn create(
    State(log): State<Log>,
    Path(name): Path<String>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let body = read_body(body, 64 << 10).await?;
    let req: CreateTopic = if body.iter().all(u8::is_ascii_whitespace) {
        CreateTopic { partitions: 1, retention_ms: None, retention_bytes: None }
    } else {
        // A wrong value's error quotes this server's bound, not the default's.
        let max = log.limits().max_partitions;
        parse_object_ranged(&body, &[("partitions", format!("an integer from 1 to {max}"))])?
    };
    let spec =
        TopicSpec { partitions: req.partitions, retention_ms: req.retention_ms, retention_bytes: req.retention_bytes };
    let (topic, created) = log.create_topic(&name, spec).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(topic_json(&topic))))
}

/// List topics, by name.
#[utoipa::path(get, path = "/v1/topics", tag = "topics", operation_id = "listTopics",
    responses((status = 200, description = "Every topic", body = TopicList, example = ex::topics), errors::ListTopics))]
pub async fn list(State(log): State<Log>) -> Result<Json<Value>, ApiError> {
    let topics = log.list_topics().await?;
    Ok(Json(json!({ "topics": topics.iter().map(topic_json).collect::<Vec<_>>() })))
}

/// Describe a topic, each of its partitions, and what the janitor has done to it.
#[utoipa::path(get, path = "/v1/topics/{topic}", tag = "topics", operation_id = "describeTopic", params(TopicPath),
    responses((status = 200, description = "The topic", body = TopicDescription, example = ex::topic_description),
        errors::OneTopic))]
pub async fn describe(State(log): State<Log>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let (topic, partitions) = log.describe_topic(&name).await?;
    let mut out = topic_json(&topic);
    let states: Vec<Value> = partitions
        .iter()
        .map(|p: &PartitionState| {
            json!({
                "partition": p.partition,
                "log_start_offset": p.log_start_offset,
                "high_watermark": p.high_watermark,
                "bytes": p.bytes,
            })
        })
        .collect();
    out["partition_states"] = Value::Array(states);
    out["upkeep"] = serde_json::to_value(log.upkeep_of(&topic).await?).unwrap_or_default();
    Ok(Json(out))
}

/// Delete a topic: at once, everywhere; its data is removed in the background.
#[utoipa::path(delete, path = "/v1/topics/{topic}", tag = "topics", operation_id = "deleteTopic", params(TopicPath),
    responses((status = 204, description = "Deleted"), errors::OneTopic))]
pub async fn delete(
    State(log): State<Log>,
    Path(name): Path<String>,
    deadline: Option<Extension<Deadline>>,
) -> Result<StatusCode, ApiError> {
    match deadline {
        Some(Extension(Deadline(ms))) => log.delete_topic_before(&name, ms).await?,
        None => log.delete_topic(&name).await?,
    }
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    use axum::http::{Method, Request};
    use sluice_core::model::Limits;
    use sluice_testkit::{MemObjects, MemStore};
    use tower::ServiceExt;

    /// A topic create on a server allowing at most 8 partitions: the status and answer.
    async fn create_on_a_server_of_8(body: &str) -> (StatusCode, Value) {
        let clock: Arc<dyn sluice_core::Clock> = Arc::new(sluice_core::ManualClock::new(1_767_225_600_000));
        let config =
            sluice_core::LogConfig { limits: Limits { max_partitions: 8, ..Limits::default() }, ..Default::default() };
        let log =
            Log::new(Arc::new(MemStore::new(clock.clone())), Arc::new(MemObjects::new(clock.clone())), clock, config);
        let request =
            Request::builder().method(Method::PUT).uri("/v1/topics/t").body(Body::from(body.to_owned())).unwrap();
        let response = crate::router(log.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        assert!(log.describe_topic("t").await.is_err(), "a refused create made the topic");
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn given_max_partitions_8_when_partitions_is_wrong_then_the_400_quotes_8() {
        for (body, message) in [
            (r#"{"partitions": -1}"#, "partitions: expected an integer from 1 to 8, got -1"),
            (r#"{"partitions": "4"}"#, r#"partitions: expected an integer from 1 to 8, got "4""#),
            (r#"{"partitions": 9}"#, "partitions must be between 1 and 8"),
        ] {
            let (status, answer) = create_on_a_server_of_8(body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            assert_eq!(answer["error"]["message"], message, "{body}");
        }
    }
}
