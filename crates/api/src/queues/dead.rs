//! The dead-letter queue: list, delete one, redrive, purge.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde_json::{json, Value};
use sluice_core::queues::{DeadLetterPage, Queues};

use crate::body::read_body;

use crate::openapi::answers::RedriveRequest as Redrive;
use crate::openapi::params::{DeadLetterPath, DeadLettersQuery, SubPath as SubParams};
use crate::openapi::{answers, errors, examples as ex};
use crate::path::Path;
use crate::read::{self, write_record, write_str};
use crate::ApiError;

use super::{json_response, parse_optional, SubPath, MAX_BODY};

/// Dead letters per page when the request does not say.
const DEFAULT_DLQ_LIMIT: usize = 100;

/// List the dead-letter queue, a page at a time, in (partition, offset) order.
#[utoipa::path(get, path = "/v1/topics/{topic}/subscriptions/{sub}/dlq", tag = "queues",
    operation_id = "listDeadLetters", params(SubParams, DeadLettersQuery),
    responses((status = 200, description = "A page of dead letters", body = answers::DeadLetters,
        example = ex::dead_letters), errors::ListDeadLetters))]
pub async fn dead_letters(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    q: read::Params,
) -> Result<Response, ApiError> {
    let q = read::params(q, &["limit", "after"])?;
    let limit = read::limit(&q, DEFAULT_DLQ_LIMIT)?;
    let after = q.get("after").map(String::as_str);
    let page = queues.dead_letters(&topic, &sub, after, limit).await?;
    Ok(json_response(render_dead_letters(&page)))
}

/// Renders a page of dead letters by hand; `event` is null once retention removed it from the log.
fn render_dead_letters(page: &DeadLetterPage) -> Vec<u8> {
    let mut out = Vec::with_capacity(page.entries.len() * 384 + 64);
    out.extend_from_slice(b"{\"dead_letters\":[");
    for (i, d) in page.entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"id\":");
        write_str(&mut out, &d.id);
        out.extend_from_slice(format!(",\"partition\":{},\"offset\":{},\"reason\":", d.partition, d.offset).as_bytes());
        write_str(&mut out, &d.reason);
        out.extend_from_slice(
            format!(
                ",\"receive_count\":{},\"first_receive_ms\":{},\"last_receive_ms\":{},\"dead_ms\":{},\"event\":",
                d.receive_count, d.first_receive_ms, d.last_receive_ms, d.dead_ms
            )
            .as_bytes(),
        );
        match &d.event {
            None => out.extend_from_slice(b"null"),
            Some(e) => {
                out.push(b'{');
                write_record(&mut out, &e.record);
                out.push(b'}');
            }
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"next\":");
    match &page.next {
        None => out.extend_from_slice(b"null"),
        Some(next) => write_str(&mut out, next),
    }
    out.push(b'}');
    out
}

/// Delete one dead letter.
#[utoipa::path(delete, path = "/v1/topics/{topic}/subscriptions/{sub}/dlq/{id}", tag = "queues",
    operation_id = "deleteDeadLetter", params(DeadLetterPath),
    responses((status = 204, description = "Deleted"), errors::DeleteDeadLetter))]
pub async fn delete_dead_letter(
    State(queues): State<Queues>,
    Path((topic, sub, id)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    queues.delete_dead_letter(&topic, &sub, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Send dead letters back to the queue, as new messages.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/dlq/redrive", tag = "queues",
    operation_id = "redrive", params(SubParams), request_body(content = Option<Redrive>, example = ex::redrive),
    responses((status = 200, description = "How many went back", body = answers::Redriven, example = ex::redriven),
        errors::Redrive))]
pub async fn redrive(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let req: Redrive = parse_optional(&read_body(body, MAX_BODY).await?)?;
    let redriven = queues.redrive(&topic, &sub, req.max_messages).await?;
    Ok(Json(json!({ "redriven": redriven })))
}

/// Purge the dead-letter queue.
#[utoipa::path(delete, path = "/v1/topics/{topic}/subscriptions/{sub}/dlq", tag = "queues",
    operation_id = "purgeDeadLetters", params(SubParams),
    responses((status = 200, description = "How many were removed", body = answers::Purged, example = ex::purged),
        errors::OneSubscription))]
pub async fn purge_dead_letters(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
) -> Result<Json<Value>, ApiError> {
    let purged = queues.purge_dead_letters(&topic, &sub).await?;
    Ok(Json(json!({ "purged": purged })))
}
