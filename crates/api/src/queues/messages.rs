//! Messages: receive (with acks riding), ack, nack and visibility changes, and their
//! per-receipt results.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;
use sluice_core::queues::{Message, Queues, ReceiptError, ReceiveRequest};

use crate::body::{parse_object, read_body};
use crate::metrics;

use crate::openapi::answers::{
    AckRequest as Ack, NackRequest as Nack, ReceiveRequest as Receive, VisibilityRequest as Visibility,
};
use crate::openapi::params::SubPath as SubParams;
use crate::openapi::{answers, errors, examples as ex};
use crate::path::Path;
use crate::read::{write_int, write_record, write_str};
use crate::ApiError;

use super::{json_response, parse_optional, SubPath, MAX_BODY};

/// Receive messages, each held for a visibility timeout; optionally ack the previous batch first.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/receive", tag = "queues", operation_id = "receive",
    params(SubParams), request_body(content = Option<Receive>, example = ex::receive),
    responses((status = 200, description = "The messages (maybe none)", body = answers::Received,
        example = ex::received), errors::Receive))]
pub async fn receive(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    deadline: Option<axum::Extension<crate::Deadline>>,
    headers: HeaderMap,
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
    let refused = |e| refused(e, &topic, &sub, &headers);
    if req.ack.is_empty() {
        let messages = queues.receive(&topic, &sub, &request).await.map_err(refused)?;
        received(&topic, &messages);
        return Ok(json_response(render_messages(&messages, None)));
    }
    let (acks, messages) = queues.ack_and_receive(&topic, &sub, &req.ack, &request).await.map_err(refused)?;
    received(&topic, &messages);
    Ok(json_response(render_messages(&messages, Some(&Results { receipts: &req.ack, outcomes: &acks }))))
}

/// The queues' refusal of a receive as an answer, its fault logged (see [`ApiError`]'s
/// `From`) in a `receive` span naming the topic, the subscription and the request's trace.
/// The span is made only here, for a refusal, as a publish's is (`publish.rs`: a span made
/// for every request formats its fields and is entered, left and freed each time, for the
/// logs of the few that fail). What the queues log on the way (a receive stopped early)
/// names its topic and subscription itself.
fn refused(e: sluice_core::Error, topic: &str, sub: &str, headers: &HeaderMap) -> ApiError {
    tracing::info_span!("receive", %topic, %sub, trace_id = crate::trace::trace_id(headers))
        .in_scope(|| ApiError::from(e))
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
}
