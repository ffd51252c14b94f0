//! Work queues: subscriptions of a topic, each a queue of its own over the topic's log.
//! `PUT|GET|DELETE /v1/topics/{topic}/subscriptions/{sub}`, `GET …/subscriptions`,
//! `POST …/{sub}/receive`, `…/ack`, `…/nack`, `…/visibility`, and the dead-letter
//! queue: `GET|DELETE …/{sub}/dlq`, `DELETE …/{sub}/dlq/{id}`, `POST …/{sub}/dlq/redrive`.
//! Parsing and rendering only: [`Queues`] checks every value before it writes.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sluice_core::queues::{
    Backlog, Backoff, DeadLetterPage, Message, Ordering, PushSpec, PushTarget, Queues, ReceiptError, ReceiveRequest,
    StartAt, Subscription, SubscriptionSpec,
};
use sluice_core::Code;

use crate::body::{parse_object, read_body};
use crate::metrics;

use crate::openapi::answers::{
    AckRequest as Ack, CreateSubscription as Create, NackRequest as Nack, PushTarget as Push,
    ReceiveRequest as Receive, RedriveRequest as Redrive, VisibilityRequest as Visibility,
};
use crate::openapi::params::{DeadLetterPath, DeadLettersQuery, SubPath as SubParams, TopicPath};
use crate::openapi::{answers, errors, examples as ex};
use crate::path::Path;
use crate::read::{self, write_int, write_record, write_str};
use crate::ApiError;

/// Queue requests are small JSON documents (at most 100 receipts).
const MAX_BODY: usize = 256 << 10;
/// Dead letters per page when the request does not say.
const DEFAULT_DLQ_LIMIT: usize = 100;

/// `{topic}` and `{sub}`.
type SubPath = Path<(String, String)>;

/// The exponential form of a backoff, checked for unknown fields before the core's
/// (untagged) [`Backoff`] reads it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Exponential {
    initial_ms: u64,
    max_ms: u64,
    multiplier: Option<u32>,
}

/// The core's ordering for the wire's.
fn ordering(ordering: answers::Ordering) -> Ordering {
    match ordering {
        answers::Ordering::None => Ordering::None,
        answers::Ordering::Key => Ordering::Key,
    }
}

/// A body whose fields are all optional: empty (or only whitespace) means all defaults.
fn parse_optional<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        parse_object(body)
    }
}

fn start(raw: Value) -> Result<StartAt, ApiError> {
    serde_json::from_value(raw).map_err(|e| {
        let shapes = r#""latest", "earliest", {"timestamp_ms": N} or {"offsets": {"<partition>": <offset>}}"#;
        ApiError::bad_request(Code::InvalidStart, format!("start must be {shapes}: {e}"))
    })
}

fn backoff(raw: Value) -> Result<Backoff, ApiError> {
    let invalid = |e: &dyn std::fmt::Display| {
        ApiError::bad_request(
            Code::InvalidBackoff,
            format!(r#"redelivery_backoff_ms must be [ms, …] or {{"initial_ms", "max_ms", "multiplier"}}: {e}"#),
        )
    };
    match &raw {
        Value::Array(_) => serde_json::from_value(raw).map(Backoff::Steps).map_err(|e| invalid(&e)),
        Value::Object(_) => {
            serde_json::from_value::<Exponential>(raw.clone()).map_err(|e| invalid(&e))?;
            serde_json::from_value(raw).map_err(|e| invalid(&e))
        }
        other => Err(invalid(&format!("got {other}"))),
    }
}

fn push(raw: Value) -> Result<PushSpec, ApiError> {
    let invalid = |m: String| ApiError::bad_request(Code::InvalidPush, m);
    let shape = r#"push must be {"url": "https://…", "secret"?, "max_batch"?, "timeout_ms"?, "max_in_flight"?} or {"lambda": "<function>", "max_batch"?, "max_in_flight"?}"#;
    let req: Push = serde_json::from_value(raw).map_err(|e| invalid(format!("{shape}: {e}")))?;
    let mut spec = match (req.url, req.lambda, req.secret) {
        (Some(url), None, secret) => PushSpec::url(url, secret),
        (None, Some(function), None) => PushSpec::lambda(function),
        (None, Some(_), Some(_)) => return Err(invalid("push.secret is for a url target".into())),
        _ => return Err(invalid(format!("{shape}: name exactly one of url and lambda"))),
    };
    spec.max_batch = req.max_batch.unwrap_or(spec.max_batch);
    spec.timeout_ms = req.timeout_ms.unwrap_or(spec.timeout_ms);
    spec.max_in_flight = req.max_in_flight.unwrap_or(spec.max_in_flight);
    Ok(spec)
}

/// A push target as shown: never its secret (the create answer adds it once).
fn push_json(p: &PushSpec) -> Value {
    let mut out = match &p.target {
        PushTarget::Url { url, .. } => json!({ "url": url }),
        PushTarget::Lambda { function } => json!({ "lambda": function }),
    };
    out["max_batch"] = json!(p.max_batch);
    out["timeout_ms"] = json!(p.timeout_ms);
    out["max_in_flight"] = json!(p.max_in_flight);
    out
}

fn subscription_json(s: &Subscription) -> Value {
    json!({
        "topic": s.topic,
        "name": s.name,
        "start": s.spec.start,
        "visibility_timeout_ms": s.spec.visibility_timeout_ms,
        "max_receive_count": s.spec.max_receive_count,
        "ordering": s.spec.ordering,
        "delay_ms": s.spec.delay_ms,
        "redelivery_backoff_ms": s.spec.redelivery_backoff,
        "filter": s.spec.filter,
        "push": s.spec.push.as_ref().map(push_json),
        "start_offsets": s.start_offsets,
        "created_ms": s.created_ms,
    })
}

fn backlog_json(b: &Backlog) -> Value {
    json!({
        "visible": b.visible,
        "in_flight": b.in_flight,
        "delayed": b.delayed,
        "dead": b.dead,
        "expired": b.expired,
        "filtered": b.filtered,
        "unscanned": b.unscanned,
        "oldest_visible_age_ms": b.oldest_visible_age_ms,
    })
}

pub(crate) fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Create a work queue on a topic (idempotent): `201` when new, `200` when it exists with
/// exactly these settings.
#[utoipa::path(put, path = "/v1/topics/{topic}/subscriptions/{sub}", tag = "queues",
    operation_id = "createSubscription", params(SubParams),
    request_body(content = Option<Create>, example = ex::create_subscription),
    responses((status = 201, description = "Created", body = answers::Subscription, example = ex::subscription),
        (status = 200, description = "It existed with these settings", body = answers::Subscription),
        errors::CreateSubscription))]
pub async fn create(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    body: Body,
) -> Result<Response, ApiError> {
    let req: Create = parse_optional(&read_body(body, MAX_BODY).await?)?;
    let defaults = SubscriptionSpec::default();
    let spec = SubscriptionSpec {
        start: req.start.map(start).transpose()?.unwrap_or(defaults.start),
        visibility_timeout_ms: req.visibility_timeout_ms.unwrap_or(defaults.visibility_timeout_ms),
        max_receive_count: req.max_receive_count.unwrap_or(defaults.max_receive_count),
        ordering: req.ordering.map(ordering).unwrap_or(defaults.ordering),
        delay_ms: req.delay_ms.unwrap_or(defaults.delay_ms),
        redelivery_backoff: req.redelivery_backoff_ms.map(backoff).transpose()?.or(defaults.redelivery_backoff),
        filter: req.filter,
        push: req.push.map(push).transpose()?,
    };
    let (subscription, created) = queues.create(&topic, &sub, spec).await?;
    let mut out = subscription_json(&subscription);
    if let Some(secret) = subscription.spec.push.as_ref().and_then(PushSpec::secret).filter(|_| created) {
        // The one answer that shows it: the receiver needs it to check signatures.
        out["push"]["secret"] = json!(secret);
    }
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(out)).into_response())
}

/// List a topic's subscriptions, by name.
#[utoipa::path(get, path = "/v1/topics/{topic}/subscriptions", tag = "queues", operation_id = "listSubscriptions",
    params(TopicPath), responses((status = 200, description = "The subscriptions", body = answers::SubscriptionList,
        example = ex::subscriptions), errors::ListSubscriptions))]
pub async fn list(State(queues): State<Queues>, Path(topic): Path<String>) -> Result<Json<Value>, ApiError> {
    let subscriptions = queues.list(&topic).await?;
    Ok(Json(json!({ "subscriptions": subscriptions.iter().map(subscription_json).collect::<Vec<_>>() })))
}

/// Describe a subscription with exact backlog counts, whole and per partition.
#[utoipa::path(get, path = "/v1/topics/{topic}/subscriptions/{sub}", tag = "queues",
    operation_id = "describeSubscription", params(SubParams), responses((status = 200, description = "The subscription",
        body = answers::SubscriptionDescription, example = ex::subscription_description), errors::OneSubscription))]
pub async fn describe(State(queues): State<Queues>, Path((topic, sub)): SubPath) -> Result<Json<Value>, ApiError> {
    let d = queues.describe(&topic, &sub).await?;
    let mut out = subscription_json(&d.subscription);
    out["backlog"] = backlog_json(&d.backlog);
    out["exact"] = json!(d.exact);
    if let Some(stats) = &d.deliveries {
        out["push"]["deliveries"] =
            json!({ "attempted": stats.attempted, "succeeded": stats.succeeded, "failed": stats.failed });
        out["push"]["last_error"] = json!(stats.last_error);
        out["push"]["last_error_ms"] = json!(stats.last_error_ms);
    }
    out["partitions"] = d
        .partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.partition,
                "cursor": p.cursor,
                "high_watermark": p.high_watermark,
                "backlog": backlog_json(&p.backlog),
            })
        })
        .collect();
    Ok(Json(out))
}

/// Delete a subscription and its messages' state.
#[utoipa::path(delete, path = "/v1/topics/{topic}/subscriptions/{sub}", tag = "queues",
    operation_id = "deleteSubscription", params(SubParams),
    responses((status = 204, description = "Deleted"), errors::OneSubscription))]
pub async fn delete(State(queues): State<Queues>, Path((topic, sub)): SubPath) -> Result<StatusCode, ApiError> {
    queues.delete(&topic, &sub).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Receive messages, each held for a visibility timeout; optionally ack the previous batch first.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/receive", tag = "queues", operation_id = "receive",
    params(SubParams), request_body(content = Option<Receive>, example = ex::receive),
    responses((status = 200, description = "The messages (maybe none)", body = answers::Received,
        example = ex::received), errors::Receive))]
#[tracing::instrument(name = "receive", skip_all, fields(%topic, %sub, trace_id = crate::trace::trace_id(&headers)))]
pub async fn receive(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    deadline: Option<axum::Extension<crate::Deadline>>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: Receive = parse_optional(&read_body(body, MAX_BODY).await?)?;
    let now_ms = queues.log().clock().as_ref().now_ms();
    let request = ReceiveRequest {
        max_messages: req.max_messages,
        wait_ms: crate::Deadline::cap_wait(
            deadline.map(|axum::Extension(d)| d),
            req.wait_ms,
            sluice_core::queues::MAX_RECEIVE_WAIT_MS,
            now_ms,
        ),
        visibility_timeout_ms: req.visibility_timeout_ms,
    };
    if req.ack.is_empty() {
        let messages = queues.receive(&topic, &sub, &request).await?;
        received(&topic, &messages);
        return Ok(json_response(render_messages(&messages, None)));
    }
    let (acks, messages) = queues.ack_and_receive(&topic, &sub, &req.ack, &request).await?;
    received(&topic, &messages);
    Ok(json_response(render_messages(&messages, Some(&Results { receipts: &req.ack, outcomes: &acks }))))
}

/// Renders received messages by hand, as replay does: values are copied as stored; with
/// the results of the acks the request carried, if any.
fn render_messages(messages: &[Message], acks: Option<&Results<'_>>) -> Vec<u8> {
    let size: usize = messages.iter().map(|m| m.event.record.approx_size() * 4 / 3 + m.receipt.len() + 160).sum();
    let mut out = Vec::with_capacity(size + 16);
    out.extend_from_slice(b"{\"messages\":[");
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"receipt\":");
        write_str(&mut out, &m.receipt);
        write_int(&mut out, ",\"partition\":", m.event.partition);
        write_int(&mut out, ",\"offset\":", m.event.offset);
        write_int(&mut out, ",\"receive_count\":", m.receive_count);
        write_int(&mut out, ",\"first_receive_ms\":", m.first_receive_ms);
        out.push(b',');
        write_record(&mut out, &m.event.record);
        out.push(b'}');
    }
    out.push(b']');
    if let Some(acks) = acks {
        out.extend_from_slice(b",\"acks\":");
        write_results(&mut out, acks);
    }
    out.push(b'}');
    out
}

/// Counts the events a receive handed out (the messages themselves are counted by the
/// queues, for pull and push alike).
fn received(topic: &str, messages: &[Message]) {
    metrics::read("queue", messages.iter().map(|msg| (topic, &msg.event)));
}

/// One result per receipt, in the order of the request: `{"ok": true, "receipt"}`, or
/// `{"error": {"code", "message"}, "ok": false, "receipt"}`. Serialised from the receipts
/// as they came, without a `Value` tree (an ack of 10 spent a fifth of its CPU building one).
struct Results<'a> {
    receipts: &'a [String],
    outcomes: &'a [Result<(), ReceiptError>],
}

/// One receipt's result; the fields in the order `json!` wrote them (sorted). `receipt` is
/// absent only where a change of visibility made a message visible (nobody holds it now).
#[derive(Serialize)]
struct Settled<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<SettleError>,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    receipt: Option<&'a str>,
}

#[derive(Serialize)]
struct SettleError {
    code: &'static str,
    message: &'static str,
}

impl<'a> Settled<'a> {
    fn ok(receipt: Option<&'a str>) -> Self {
        Settled { error: None, ok: true, receipt }
    }

    fn refused(receipt: &'a str, e: ReceiptError) -> Self {
        Settled {
            error: Some(SettleError { code: e.code().as_str(), message: e.message() }),
            ok: false,
            receipt: Some(receipt),
        }
    }
}

impl Serialize for Results<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.receipts.iter().zip(self.outcomes).map(|(receipt, outcome)| match outcome {
            Ok(()) => Settled::ok(Some(receipt)),
            Err(e) => Settled::refused(receipt, *e),
        }))
    }
}

/// `{"results": […]}`, the answer of the routes that settle receipts.
#[derive(Serialize)]
struct SettledAnswer<T> {
    results: T,
}

/// The answer to settling `receipts`: `results`, one per receipt, under `"results"`.
fn settled_response(receipts: &[String], results: impl Serialize) -> Response {
    let mut out = Vec::with_capacity(16 + receipts.iter().map(|r| r.len() + 32).sum::<usize>());
    // Strings and booleans written into a Vec: this cannot fail.
    let _ = serde_json::to_writer(&mut out, &SettledAnswer { results });
    json_response(out)
}

/// The answer to an ack or a nack: one result per receipt, settled or refused.
fn settled(receipts: &[String], outcomes: &[Result<(), ReceiptError>]) -> Response {
    settled_response(receipts, Results { receipts, outcomes })
}

fn write_results(out: &mut Vec<u8>, results: &Results<'_>) {
    // Strings and booleans written into a Vec: this cannot fail.
    let _ = serde_json::to_writer(&mut *out, results);
}

/// Ack received messages: done with them.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/ack", tag = "queues", operation_id = "ack",
    params(SubParams), request_body(content = Ack, example = ex::ack),
    responses((status = 200, description = "One result per receipt", body = answers::Settled, example = ex::settled),
        errors::Ack))]
pub async fn ack(State(queues): State<Queues>, Path((topic, sub)): SubPath, body: Body) -> Result<Response, ApiError> {
    let req: Ack = parse_object(&read_body(body, MAX_BODY).await?)?;
    let outcomes = queues.ack(&topic, &sub, &req.receipts).await?;
    Ok(settled(&req.receipts, &outcomes))
}

/// Nack received messages: give them back, for redelivery after `delay_ms`.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/nack", tag = "queues", operation_id = "nack",
    params(SubParams), request_body(content = Nack, example = ex::nack),
    responses((status = 200, description = "One result per receipt", body = answers::Settled, example = ex::settled),
        errors::Nack))]
pub async fn nack(State(queues): State<Queues>, Path((topic, sub)): SubPath, body: Body) -> Result<Response, ApiError> {
    let req: Nack = parse_object(&read_body(body, MAX_BODY).await?)?;
    let outcomes = queues.nack(&topic, &sub, &req.receipts, req.delay_ms).await?;
    Ok(settled(&req.receipts, &outcomes))
}

/// Change received messages' visibility timeout: each result that is `ok` carries the receipt
/// to use from now on, in place of the one sent.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/visibility", tag = "queues",
    operation_id = "changeVisibility", params(SubParams), request_body(content = Visibility, example = ex::visibility),
    responses((status = 200, description = "One result per receipt", body = answers::Settled, example = ex::renewed),
        errors::Visibility))]
pub async fn visibility(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    body: Body,
) -> Result<Response, ApiError> {
    let req: Visibility = parse_object(&read_body(body, MAX_BODY).await?)?;
    let outcomes = queues.change_visibility(&topic, &sub, &req.receipts, req.visibility_timeout_ms).await?;
    let results = req.receipts.iter().zip(&outcomes).map(|(sent, outcome)| match outcome {
        Ok(Some(renewed)) => Settled::ok(Some(renewed.as_str())),
        // Made visible: nobody holds it any more, so there is no receipt to renew.
        Ok(None) => Settled::ok(None),
        Err(e) => Settled::refused(sent, *e),
    });
    Ok(settled_response(&req.receipts, results.collect::<Vec<_>>()))
}

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

#[cfg(test)]
mod tests {
    use axum::http::{Method, Request};
    use axum::Router;
    use serde_json::{json, Value};
    use tower::ServiceExt;

    use super::*;

    const SUB: &str = "/v1/topics/jobs/subscriptions/workers";

    /// The full router on a fresh embedded backend (the directory lives as long as the router).
    fn app() -> (Router, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let clock: std::sync::Arc<dyn sluice_core::Clock> = std::sync::Arc::new(sluice_core::SystemClock);
        let (store, objects) = sluice_local::open(dir.path(), clock.clone()).unwrap();
        let log = sluice_core::Log::new(store, objects, clock, sluice_core::LogConfig::default());
        (crate::router(log), dir)
    }

    async fn call(app: &Router, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(path);
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request.body(Body::from(body.unwrap_or_default().to_owned())).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
    }

    async fn ok(app: &Router, method: Method, path: &str, body: Option<&str>) -> Value {
        let (status, value) = call(app, method.clone(), path, body).await;
        assert!(status.is_success(), "{method} {path}: {status} {value}");
        value
    }

    /// A topic of 2 partitions, a subscription from its start, and 3 events on partition 1.
    async fn given_a_queue_with_three_messages() -> (Router, tempfile::TempDir) {
        let (app, dir) = app();
        ok(&app, Method::PUT, "/v1/topics/jobs", Some(r#"{"partitions": 2}"#)).await;
        let (status, _) = call(&app, Method::PUT, SUB, Some(r#"{"start": "earliest", "max_receive_count": 2}"#)).await;
        assert_eq!(status, StatusCode::CREATED);
        let events = r#"{"events": [{"value": 1, "partition": 1}, {"value": 2, "partition": 1},
                                    {"value_base64": "AAEC", "key": "k", "headers": {"h": "v"}, "partition": 1}]}"#;
        ok(&app, Method::POST, "/v1/topics/jobs/events", Some(events)).await;
        (app, dir)
    }

    /// What a client can see of the queues: the list, the description (the age of the oldest
    /// visible message moves with the clock: only whether there is one), the dead letters.
    async fn snapshot(app: &Router) -> Value {
        let mut described = ok(app, Method::GET, SUB, None).await;
        let mask = |b: &mut Value| b["oldest_visible_age_ms"] = json!(b["oldest_visible_age_ms"].is_u64());
        mask(&mut described["backlog"]);
        for p in described["partitions"].as_array_mut().unwrap() {
            mask(&mut p["backlog"]);
        }
        json!({
            "list": ok(app, Method::GET, "/v1/topics/jobs/subscriptions", None).await,
            "described": described,
            "dlq": ok(app, Method::GET, &format!("{SUB}/dlq"), None).await,
            "topic": ok(app, Method::GET, "/v1/topics/jobs", None).await,
        })
    }

    #[test]
    fn settle_results_render_byte_for_byte_as_a_json_tree_of_them_does() {
        let receipts = vec!["a".to_owned(), "b\"q".to_owned(), "c".to_owned()];
        let outcomes = vec![Ok(()), Err(ReceiptError::Stale), Err(ReceiptError::Invalid)];
        let mut out = Vec::new();
        write_results(&mut out, &Results { receipts: &receipts, outcomes: &outcomes });
        let error = |e: ReceiptError| json!({ "code": e.code().as_str(), "message": e.message() });
        let tree = json!([
            { "receipt": "a", "ok": true },
            { "receipt": "b\"q", "ok": false, "error": error(ReceiptError::Stale) },
            { "receipt": "c", "ok": false, "error": error(ReceiptError::Invalid) },
        ]);
        assert_eq!(String::from_utf8(out).unwrap(), tree.to_string());
    }

    #[tokio::test]
    async fn given_bad_requests_then_each_is_its_4xx_json_error_and_nothing_changes() {
        let (app, _dir) = given_a_queue_with_three_messages().await;
        let before = snapshot(&app).await;
        assert_eq!(before["described"]["backlog"]["visible"], 3, "{before}");
        let other = "/v1/topics/jobs/subscriptions/other";
        let receipts = serde_json::to_string(&json!({ "receipts": vec!["r"; 101] })).unwrap();
        let huge = format!(r#"{{"receipts": ["{}"]}}"#, "r".repeat(MAX_BODY));
        let cases: Vec<(Method, String, Option<&str>, StatusCode, &str)> = vec![
            // Creating: the body's shape, then each setting.
            (Method::PUT, other.into(), Some("{"), StatusCode::BAD_REQUEST, "invalid_json"),
            (Method::PUT, other.into(), Some("[]"), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::PUT, other.into(), Some(r#"{"colour": "red"}"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::PUT, other.into(), Some(r#"{"start": "middle"}"#), StatusCode::BAD_REQUEST, "invalid_start"),
            (Method::PUT, other.into(), Some(r#"{"start": 5}"#), StatusCode::BAD_REQUEST, "invalid_start"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"start": {"timestamp_ms": -1}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_start",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"start": {"offsets": {"7": 0}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_start",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"start": {"offsets": {"1": 99}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_start",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"start": {"offsets": {"one": 0}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_start",
            ),
            (Method::PUT, other.into(), Some(r#"{"ordering": "random"}"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"visibility_timeout_ms": 43200001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_visibility_timeout",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"visibility_timeout_ms": -1}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"max_receive_count": 0}"#),
                StatusCode::BAD_REQUEST,
                "invalid_max_receive_count",
            ),
            (Method::PUT, other.into(), Some(r#"{"delay_ms": 900001}"#), StatusCode::BAD_REQUEST, "invalid_delay"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"redelivery_backoff_ms": []}"#),
                StatusCode::BAD_REQUEST,
                "invalid_backoff",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"redelivery_backoff_ms": "1s"}"#),
                StatusCode::BAD_REQUEST,
                "invalid_backoff",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"redelivery_backoff_ms": {"initial_ms": 10, "max_ms": 100, "factor": 2}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_backoff",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"redelivery_backoff_ms": {"initial_ms": 100, "max_ms": 10}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_backoff",
            ),
            (Method::PUT, "/v1/topics/jobs/subscriptions/a%20b".into(), None, StatusCode::BAD_REQUEST, "invalid_name"),
            (Method::PUT, "/v1/topics/nope/subscriptions/x".into(), None, StatusCode::NOT_FOUND, "topic_not_found"),
            // The same name with other settings.
            (Method::PUT, SUB.into(), Some(r#"{"start": "latest"}"#), StatusCode::CONFLICT, "subscription_exists"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"filter": {"value": {"kind": "a"}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_filter",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"filter": {"value": {"n": [{"prefx": "a"}]}}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_filter",
            ),
            (Method::PUT, other.into(), Some(r#"{"filter": []}"#), StatusCode::BAD_REQUEST, "invalid_filter"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "ftp://x"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (Method::PUT, other.into(), Some(r#"{"push": {}}"#), StatusCode::BAD_REQUEST, "invalid_push"),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "lambda": "f"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"lambda": "f", "secret": "whsec_AAAAAAAAAAAAAAAAAAAAAAAA"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "secret": "nope"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "max_batch": 101}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "timeout_ms": 999}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "max_in_flight": 0}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            (
                Method::PUT,
                other.into(),
                Some(r#"{"push": {"url": "http://a", "colour": "red"}}"#),
                StatusCode::BAD_REQUEST,
                "invalid_push",
            ),
            // Receiving.
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"max_messages": 0}"#),
                StatusCode::BAD_REQUEST,
                "invalid_max_messages",
            ),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"max_messages": 101}"#),
                StatusCode::BAD_REQUEST,
                "invalid_max_messages",
            ),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"wait_ms": 20001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_wait",
            ),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"visibility_timeout_ms": 43200001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_visibility_timeout",
            ),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some(r#"{"max_messages": "ten"}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (Method::POST, format!("{SUB}/receive"), Some(r#"{"max": 1}"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (
                Method::POST,
                format!("{SUB}/receive"),
                Some("{\"max_messages\""),
                StatusCode::BAD_REQUEST,
                "invalid_json",
            ),
            (Method::POST, format!("{other}/receive"), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (
                Method::POST,
                "/v1/topics/nope/subscriptions/x/receive".into(),
                None,
                StatusCode::NOT_FOUND,
                "topic_not_found",
            ),
            (Method::GET, format!("{SUB}/receive"), None, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            // Settling.
            (Method::POST, format!("{SUB}/ack"), Some(&receipts), StatusCode::BAD_REQUEST, "too_many_receipts"),
            (Method::POST, format!("{SUB}/nack"), Some(&receipts), StatusCode::BAD_REQUEST, "too_many_receipts"),
            (Method::POST, format!("{SUB}/ack"), Some("{}"), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::POST, format!("{SUB}/ack"), Some(r#"[["r"]]"#), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::POST, format!("{SUB}/receive"), Some("[1]"), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::POST, format!("{SUB}/ack"), None, StatusCode::BAD_REQUEST, "invalid_json"),
            (
                Method::POST,
                format!("{SUB}/ack"),
                Some(r#"{"receipts": ["r"], "delay_ms": 5}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (Method::POST, format!("{SUB}/ack"), Some(&huge), StatusCode::PAYLOAD_TOO_LARGE, "request_too_large"),
            (
                Method::POST,
                format!("{SUB}/nack"),
                Some(r#"{"receipts": ["r"], "delay_ms": 43200001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_delay",
            ),
            (
                Method::POST,
                format!("{SUB}/visibility"),
                Some(r#"{"receipts": ["r"]}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (
                Method::POST,
                format!("{SUB}/visibility"),
                Some(r#"{"receipts": ["r"], "visibility_timeout_ms": 43200001}"#),
                StatusCode::BAD_REQUEST,
                "invalid_visibility_timeout",
            ),
            (
                Method::POST,
                format!("{other}/ack"),
                Some(r#"{"receipts": ["r"]}"#),
                StatusCode::NOT_FOUND,
                "subscription_not_found",
            ),
            // The dead-letter queue.
            (Method::GET, format!("{SUB}/dlq?limit=ten"), None, StatusCode::BAD_REQUEST, "invalid_limit"),
            (Method::GET, format!("{SUB}/dlq?after=x"), None, StatusCode::BAD_REQUEST, "invalid_dead_letter_id"),
            (Method::GET, format!("{other}/dlq"), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (Method::DELETE, format!("{SUB}/dlq/zz"), None, StatusCode::BAD_REQUEST, "invalid_dead_letter_id"),
            (Method::DELETE, format!("{SUB}/dlq/9-0"), None, StatusCode::NOT_FOUND, "partition_not_found"),
            (Method::GET, format!("{SUB}/dlq?after=9-0"), None, StatusCode::NOT_FOUND, "partition_not_found"),
            (Method::GET, format!("{SUB}/dlq?limit=0"), None, StatusCode::BAD_REQUEST, "invalid_limit"),
            (Method::GET, format!("{SUB}/dlq?limit=1001"), None, StatusCode::BAD_REQUEST, "invalid_limit"),
            (Method::GET, format!("{SUB}/dlq?limt=5"), None, StatusCode::BAD_REQUEST, "invalid_query"),
            (Method::DELETE, format!("{SUB}/dlq/1-0"), None, StatusCode::NOT_FOUND, "dead_letter_not_found"),
            (
                Method::POST,
                format!("{SUB}/dlq/redrive"),
                Some(r#"{"max_messages": -1}"#),
                StatusCode::BAD_REQUEST,
                "invalid_request",
            ),
            (Method::POST, format!("{other}/dlq/redrive"), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (Method::DELETE, format!("{other}/dlq"), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            // Describing and deleting.
            (Method::GET, other.into(), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (Method::DELETE, other.into(), None, StatusCode::NOT_FOUND, "subscription_not_found"),
            (Method::GET, "/v1/topics/nope/subscriptions".into(), None, StatusCode::NOT_FOUND, "topic_not_found"),
        ];
        for (method, path, body, status, code) in cases {
            let label = format!("{method} {path} {}", body.unwrap_or_default().chars().take(80).collect::<String>());
            let (got, answer) = call(&app, method, &path, body).await;
            assert_eq!((got, answer["error"]["code"].as_str()), (status, Some(code)), "{label}: {answer}");
            assert!(answer["error"]["message"].is_string(), "{label}: {answer}");
            assert_eq!(snapshot(&app).await, before, "{label} changed something");
        }
    }

    #[tokio::test]
    async fn given_receipts_good_and_bad_then_each_has_its_result_and_only_good_ones_act() {
        let (app, _dir) = given_a_queue_with_three_messages().await;
        let received = ok(&app, Method::POST, &format!("{SUB}/receive"), Some(r#"{"max_messages": 10}"#)).await;
        let messages = received["messages"].as_array().unwrap();
        let fields: Vec<(&Value, &Value, &Value)> =
            messages.iter().map(|m| (&m["partition"], &m["offset"], &m["receive_count"])).collect();
        assert_eq!(
            fields,
            [(&json!(1), &json!(0), &json!(1)), (&json!(1), &json!(1), &json!(1)), (&json!(1), &json!(2), &json!(1))]
        );
        // The event as replay renders it.
        let replay = ok(&app, Method::GET, "/v1/topics/jobs/partitions/1/events?offset=2", None).await;
        let mut third = messages[2].clone();
        for field in ["receipt", "receive_count", "first_receive_ms"] {
            third.as_object_mut().unwrap().remove(field);
        }
        assert_eq!(third, replay["events"][0]);
        assert_eq!(third["value_base64"], "AAEC");
        let receipt = |i: usize| messages[i]["receipt"].as_str().unwrap().to_owned();

        let body = json!({ "receipts": [receipt(0), "not-a-receipt"] }).to_string();
        let acked = ok(&app, Method::POST, &format!("{SUB}/ack"), Some(&body)).await;
        assert_eq!(acked["results"][0], json!({ "receipt": receipt(0), "ok": true }));
        assert_eq!(acked["results"][1]["error"]["code"], "invalid_receipt", "{acked}");
        assert_eq!(acked["results"][1]["ok"], false);
        let again =
            ok(&app, Method::POST, &format!("{SUB}/ack"), Some(&json!({ "receipts": [receipt(0)] }).to_string())).await;
        assert_eq!(
            again["results"][0],
            json!({ "receipt": receipt(0), "ok": true }),
            "acked already, as a retry finds"
        );

        let body = json!({ "receipts": [receipt(2)], "visibility_timeout_ms": 60000 }).to_string();
        let extended = ok(&app, Method::POST, &format!("{SUB}/visibility"), Some(&body)).await;
        assert_eq!(extended["results"][0]["ok"], true, "{extended}");
        let renewed = extended["results"][0]["receipt"].as_str().unwrap().to_owned();
        assert_ne!(renewed, receipt(2), "a new receipt for the new window");

        let nacked =
            ok(&app, Method::POST, &format!("{SUB}/nack"), Some(&json!({ "receipts": [receipt(1)] }).to_string()))
                .await;
        assert_eq!(nacked["results"][0], json!({ "receipt": receipt(1), "ok": true }));
        let described = ok(&app, Method::GET, SUB, None).await;
        assert_eq!(described["backlog"]["visible"], 1, "{described}");
        assert_eq!(described["backlog"]["in_flight"], 1, "{described}");
        assert_eq!(described["partitions"][1]["cursor"], 3, "{described}");
        // A refused receipt is echoed; one made visible has no receipt (nobody holds it now).
        let body = json!({ "receipts": ["not-a-receipt", renewed], "visibility_timeout_ms": 0 }).to_string();
        let released = ok(&app, Method::POST, &format!("{SUB}/visibility"), Some(&body)).await;
        let invalid = ReceiptError::Invalid;
        let refused = json!({ "receipt": "not-a-receipt", "ok": false,
            "error": { "code": invalid.code().as_str(), "message": invalid.message() } });
        assert_eq!(released["results"], json!([refused, { "ok": true }]), "{released}");

        // The released message comes back with its count; at the limit (2) it goes to the DLQ
        // when released again, and a redrive brings it back.
        let back = ok(&app, Method::POST, &format!("{SUB}/receive"), Some(r#"{"max_messages": 10}"#)).await;
        assert_eq!((&back["messages"][0]["offset"], &back["messages"][0]["receive_count"]), (&json!(1), &json!(2)));
        let last = back["messages"][0]["receipt"].as_str().unwrap();
        ok(&app, Method::POST, &format!("{SUB}/nack"), Some(&json!({ "receipts": [last] }).to_string())).await;
        let dlq = ok(&app, Method::GET, &format!("{SUB}/dlq"), None).await;
        let dead = &dlq["dead_letters"];
        assert_eq!(dead.as_array().map(Vec::len), Some(1), "{dlq}");
        assert_eq!(
            (&dead[0]["id"], &dead[0]["receive_count"], &dead[0]["event"]["value"]),
            (&json!("1-1"), &json!(2), &json!(2))
        );
        assert_eq!(dlq["next"], Value::Null);
        let redriven = ok(&app, Method::POST, &format!("{SUB}/dlq/redrive"), None).await;
        assert_eq!(redriven, json!({ "redriven": 1 }));
        let purged = ok(&app, Method::DELETE, &format!("{SUB}/dlq"), None).await;
        assert_eq!(purged, json!({ "purged": 0 }));

        let (status, _) = call(&app, Method::DELETE, SUB, None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(call(&app, Method::GET, SUB, None).await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn given_a_receive_carrying_acks_then_it_acks_them_and_receives_the_next_batch() {
        let (app, _dir) = given_a_queue_with_three_messages().await;
        let first = ok(&app, Method::POST, &format!("{SUB}/receive"), Some(r#"{"max_messages": 2}"#)).await;
        assert!(first.get("acks").is_none(), "no acks asked for, none answered: {first}");
        let receipts: Vec<&str> =
            first["messages"].as_array().unwrap().iter().map(|m| m["receipt"].as_str().unwrap()).collect();
        let body = json!({ "max_messages": 10, "ack": [receipts[0], receipts[1], "not-a-receipt"] }).to_string();
        let next = ok(&app, Method::POST, &format!("{SUB}/receive"), Some(&body)).await;
        assert_eq!(next["acks"][0], json!({ "receipt": receipts[0], "ok": true }), "{next}");
        assert_eq!(next["acks"][1]["ok"], true);
        assert_eq!(next["acks"][2]["error"]["code"], "invalid_receipt");
        assert_eq!(next["messages"].as_array().map(Vec::len), Some(1), "the third message: {next}");
        let described = ok(&app, Method::GET, SUB, None).await;
        assert_eq!((&described["backlog"]["visible"], &described["backlog"]["in_flight"]), (&json!(0), &json!(1)));

        // A bad receive acks nothing.
        let last = next["messages"][0]["receipt"].as_str().unwrap();
        let body = json!({ "max_messages": 0, "ack": [last] }).to_string();
        let (status, error) = call(&app, Method::POST, &format!("{SUB}/receive"), Some(&body)).await;
        assert_eq!((status, &error["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_max_messages")));
        let described = ok(&app, Method::GET, SUB, None).await;
        assert_eq!(described["backlog"]["in_flight"], 1, "still held: {described}");
    }

    #[tokio::test]
    async fn given_settings_then_created_once_and_rendered_as_given() {
        let (app, _dir) = app();
        ok(&app, Method::PUT, "/v1/topics/jobs", Some(r#"{"partitions": 2}"#)).await;
        let body = r#"{"start": {"offsets": {"1": 0}}, "visibility_timeout_ms": 5000, "max_receive_count": 9,
                       "ordering": "key", "delay_ms": 10, "redelivery_backoff_ms": {"initial_ms": 100, "max_ms": 800}}"#;
        let (status, created) = call(&app, Method::PUT, SUB, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        assert_eq!(created["start"], json!({"offsets": {"1": 0}}));
        assert_eq!(created["ordering"], "key");
        assert_eq!(created["redelivery_backoff_ms"], json!({"initial_ms": 100, "max_ms": 800, "multiplier": 2}));
        assert_eq!(created["start_offsets"], json!([0, 0]));
        let (status, again) = call(&app, Method::PUT, SUB, Some(body)).await;
        assert_eq!((status, &again), (StatusCode::OK, &created));

        // No body: every default.
        let (status, plain) = call(&app, Method::PUT, "/v1/topics/jobs/subscriptions/plain", None).await;
        assert_eq!(status, StatusCode::CREATED, "{plain}");
        assert_eq!(
            (&plain["start"], &plain["visibility_timeout_ms"], &plain["max_receive_count"], &plain["ordering"]),
            (&json!("latest"), &json!(30000), &json!(5), &json!("none"))
        );
        assert_eq!((&plain["delay_ms"], &plain["redelivery_backoff_ms"]), (&json!(0), &Value::Null));
        let steps = r#"{"redelivery_backoff_ms": [10, 20]}"#;
        let (_, stepped) = call(&app, Method::PUT, "/v1/topics/jobs/subscriptions/steps", Some(steps)).await;
        assert_eq!(stepped["redelivery_backoff_ms"], json!([10, 20]));

        let list = ok(&app, Method::GET, "/v1/topics/jobs/subscriptions", None).await;
        let names: Vec<&Value> = list["subscriptions"].as_array().unwrap().iter().map(|s| &s["name"]).collect();
        assert_eq!(names, [&json!("plain"), &json!("steps"), &json!("workers")]);
        let empty = ok(&app, Method::POST, &format!("{SUB}/receive"), None).await;
        assert_eq!(empty, json!({ "messages": [] }));
    }

    #[tokio::test]
    async fn given_a_push_subscription_then_its_secret_shows_once_and_clients_cannot_receive() {
        let (app, _dir) = app();
        ok(&app, Method::PUT, "/v1/topics/jobs", Some(r#"{"partitions": 2}"#)).await;
        let body = r#"{"push": {"url": "http://127.0.0.1:3000/hook", "max_batch": 20}, "filter": {"key": [{"prefix": "eu-"}]}}"#;
        let (status, created) = call(&app, Method::PUT, SUB, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let secret = created["push"]["secret"].as_str().expect("the create answer shows the secret").to_owned();
        assert!(secret.starts_with("whsec_"));
        assert_eq!(created["push"]["url"], "http://127.0.0.1:3000/hook");
        assert_eq!((&created["push"]["max_batch"], &created["push"]["timeout_ms"]), (&json!(20), &json!(10000)));
        assert_eq!(created["filter"], json!({"key": [{"prefix": "eu-"}]}));
        let (status, again) = call(&app, Method::PUT, SUB, Some(body)).await;
        assert_eq!(status, StatusCode::OK, "the same settings without a secret: the same subscription");
        assert_eq!(again["push"].get("secret"), None, "only the create answer shows the secret");
        let described = ok(&app, Method::GET, SUB, None).await;
        assert_eq!(described["push"].get("secret"), None);
        assert_eq!(described["push"]["deliveries"], json!({"attempted": 0, "succeeded": 0, "failed": 0}));
        assert_eq!(described["backlog"]["filtered"], 0);
        assert!(!described.to_string().contains(&secret));
        let listed = ok(&app, Method::GET, "/v1/topics/jobs/subscriptions", None).await;
        assert!(!listed.to_string().contains(&secret));
        let (status, refused) = call(&app, Method::POST, &format!("{SUB}/receive"), None).await;
        assert_eq!((status, &refused["error"]["code"]), (StatusCode::CONFLICT, &json!("push_subscription")));
        let given = r#"{"push": {"lambda": "arn:aws:lambda:eu-west-1:123456789012:function:f"}}"#;
        let (status, lambda) = call(&app, Method::PUT, "/v1/topics/jobs/subscriptions/fn", Some(given)).await;
        assert_eq!(status, StatusCode::CREATED, "{lambda}");
        assert_eq!(lambda["push"]["lambda"], "arn:aws:lambda:eu-west-1:123456789012:function:f");
        assert_eq!(lambda["push"].get("secret"), None);
    }
}
