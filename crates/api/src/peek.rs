//! `GET /v1/topics/{topic}/subscriptions/{sub}/messages`: the visible messages of a
//! subscription, seen without receiving them (nothing is held, counted or moved).

use axum::extract::State;
use axum::response::Response;
use sluice_core::queues::{Peeked, Queues};

use crate::openapi::params::{PeekQuery, SubPath as SubParams};
use crate::openapi::{answers, errors, examples as ex};
use crate::path::Path;
use crate::read::{self, write_int, write_record};
use crate::ApiError;

/// Messages a peek answers when the request does not say.
const DEFAULT_LIMIT: usize = 10;

/// Peek at the visible messages: what the next receives would get, without taking them
/// (no receive count, lease or cursor changes).
#[utoipa::path(get, path = "/v1/topics/{topic}/subscriptions/{sub}/messages", tag = "queues",
    operation_id = "peek", params(SubParams, PeekQuery),
    responses((status = 200, description = "The visible messages (maybe none)", body = answers::Peeked,
        example = ex::peeked), errors::Peek))]
pub async fn peek(
    State(queues): State<Queues>,
    Path((topic, sub)): Path<(String, String)>,
    q: read::Params,
) -> Result<Response, ApiError> {
    let q = read::params(q, &["limit"])?;
    let limit = read::limit(&q, DEFAULT_LIMIT)?;
    let messages = queues.peek(&topic, &sub, limit).await?;
    Ok(crate::queues::json_response(render(&messages)))
}

/// Renders peeked messages by hand, as receive does: values are copied as stored.
fn render(messages: &[Peeked]) -> Vec<u8> {
    let size: usize = messages.iter().map(|m| m.event.record.approx_size() * 4 / 3 + 96).sum();
    let mut out = Vec::with_capacity(size + 16);
    out.extend_from_slice(b"{\"messages\":[");
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_int(&mut out, "{\"partition\":", m.event.partition);
        write_int(&mut out, ",\"offset\":", m.event.offset);
        write_int(&mut out, ",\"receive_count\":", m.receive_count);
        out.push(b',');
        write_record(&mut out, &m.event.record);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}
