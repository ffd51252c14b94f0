//! Subscriptions: create (idempotent), list, describe, change, delete, pause and resume.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sluice_core::queues::{
    Backlog, Backoff, Ordering, PushPatch, PushSpec, PushTarget, Queues, Rate, StartAt, Subscription,
    SubscriptionPatch, SubscriptionSpec, SuspendAfter,
};
use sluice_core::Code;

use crate::body::read_body;

use crate::openapi::answers::{CreateSubscription as Create, PushTarget as Push};
use crate::openapi::params::{SubPath as SubParams, TopicPath};
use crate::openapi::{answers, errors, examples as ex};
use crate::path::Path;
use crate::ApiError;

use super::{parse_optional, SubPath, MAX_BODY};

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
    let shape = r#"push must be {"url": "https://…", "secret"?, "max_batch"?, "timeout_ms"?, "max_in_flight"?, "suspend_after"?} or {"lambda": "<function>", "max_batch"?, "max_in_flight"?, "suspend_after"?}"#;
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
    spec.suspend_after = req.suspend_after.map(|s| SuspendAfter { failures: s.failures, spanning_ms: s.spanning_ms });
    Ok(spec)
}

/// A rate as given: its bounds are the core's to check (`400 invalid_request` naming the field).
fn rate(raw: Value) -> Result<Rate, ApiError> {
    let rate: answers::Rate = serde_json::from_value(raw).map_err(|e| {
        ApiError::bad_request(
            Code::InvalidRequest,
            format!(r#"rate must be {{"per_second": 1–10000, "burst": ≥ 1}}: {e}"#),
        )
    })?;
    Ok(Rate { per_second: rate.per_second, burst: rate.burst })
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
    let suspend = p.suspend_after();
    out["suspend_after"] = json!({ "failures": suspend.failures, "spanning_ms": suspend.spanning_ms });
    if let Some(previous) = &p.previous_secret {
        out["previous_secret_expires_ms"] = json!(previous.expires_ms);
    }
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
        "rate": s.spec.rate.map(|r| json!({ "per_second": r.per_second, "burst": r.burst })),
        "start_offsets": s.start_offsets,
        "created_ms": s.created_ms,
        "state": s.state,
    })
}

fn backlog_json(b: &Backlog) -> Value {
    json!({
        "visible": b.visible,
        "in_flight": b.in_flight,
        "delayed": b.delayed,
        "scheduled": b.scheduled,
        "dead": b.dead,
        "expired": b.expired,
        "filtered": b.filtered,
        "unscanned": b.unscanned,
        "oldest_visible_age_ms": b.oldest_visible_age_ms,
    })
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
        rate: req.rate.map(rate).transpose()?,
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
    described(&queues, &topic, &sub).await
}

/// The subscription as describe answers it.
async fn described(queues: &Queues, topic: &str, sub: &str) -> Result<Json<Value>, ApiError> {
    let d = queues.describe(topic, sub).await?;
    let mut out = subscription_json(&d.subscription);
    out["backlog"] = backlog_json(&d.backlog);
    out["exact"] = json!(d.exact);
    if let Some(throttled) = d.throttled_ms {
        out["throttled_ms"] = json!(throttled);
    }
    if let Some(stats) = &d.deliveries {
        out["push"]["deliveries"] =
            json!({ "attempted": stats.attempted, "succeeded": stats.succeeded, "failed": stats.failed });
        out["push"]["last_error"] = json!(stats.last_error);
        out["push"]["last_error_ms"] = json!(stats.last_error_ms);
        let flow = stats.flow.clone().unwrap_or_default();
        let ceiling = d.subscription.spec.push.as_ref().map_or(1, |p| p.max_in_flight);
        out["delivery"] = json!({
            "in_flight_limit": flow.limit(ceiling),
            "retry_after_until_ms": flow.not_before_ms.filter(|t| *t > queues.log().clock().now_ms()),
            "consecutive_failures": flow.failures,
            "failing_since_ms": flow.failing_since_ms,
            "suspended_since_ms": flow.suspended_since_ms,
        });
    }
    out["partitions"] = d
        .partitions
        .iter()
        .map(|p| {
            let mut out = json!({
                "partition": p.partition,
                "cursor": p.cursor,
                "high_watermark": p.high_watermark,
                "backlog": backlog_json(&p.backlog),
            });
            if let Some(since) = p.filter_since {
                out["filter_since"] = json!(since);
            }
            out
        })
        .collect();
    Ok(Json(out))
}

/// Change a subscription's settings in place: those named change, the others stay; `null`
/// removes a filter or a backoff; `start` and `ordering` cannot change. Once this answers,
/// every receive or delivery that starts uses the new settings; leases already granted keep
/// their windows, and a new filter applies on each partition from `filter_since`.
#[utoipa::path(patch, path = "/v1/topics/{topic}/subscriptions/{sub}", tag = "queues",
    operation_id = "patchSubscription", params(SubParams),
    request_body(content = Option<answers::PatchSubscription>, example = ex::patch_subscription),
    responses((status = 200, description = "Changed (or already so): the subscription as describe shows it",
        body = answers::SubscriptionDescription, example = ex::patched_subscription), errors::PatchSubscription))]
pub async fn patch(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let req: answers::PatchSubscription = parse_optional(&read_body(body, MAX_BODY).await?)?;
    let nullable = |v: Value| Some(v).filter(|v| !v.is_null());
    let change = SubscriptionPatch {
        start: req.start.map(start).transpose()?,
        ordering: req.ordering.map(ordering),
        visibility_timeout_ms: req.visibility_timeout_ms,
        max_receive_count: req.max_receive_count,
        delay_ms: req.delay_ms,
        redelivery_backoff: req.redelivery_backoff_ms.map(|b| nullable(b).map(backoff).transpose()).transpose()?,
        filter: req.filter.map(nullable),
        push: req.push.map(|p| PushPatch {
            url: p.url,
            lambda: p.lambda,
            max_batch: p.max_batch,
            timeout_ms: p.timeout_ms,
            max_in_flight: p.max_in_flight,
        }),
        rate: req.rate.map(|r| nullable(r).map(rate).transpose()).transpose()?,
    };
    queues.patch(&topic, &sub, &change).await?;
    described(&queues, &topic, &sub).await
}

/// Delete a subscription and its messages' state.
#[utoipa::path(delete, path = "/v1/topics/{topic}/subscriptions/{sub}", tag = "queues",
    operation_id = "deleteSubscription", params(SubParams),
    responses((status = 204, description = "Deleted"), errors::OneSubscription))]
pub async fn delete(State(queues): State<Queues>, Path((topic, sub)): SubPath) -> Result<StatusCode, ApiError> {
    queues.delete(&topic, &sub).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body pause and resume take: none, or `{}`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct NoFields {}

/// Pause a subscription (idempotent): it keeps counting the log's events and delivers
/// nothing until resumed; messages already out can still be acked, nacked and held.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/pause", tag = "queues",
    operation_id = "pauseSubscription", params(SubParams), responses((status = 200,
        description = "Paused: the subscription as describe shows it", body = answers::SubscriptionDescription,
        example = ex::paused_subscription), errors::ChangeState))]
pub async fn pause(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let _: NoFields = parse_optional(&read_body(body, MAX_BODY).await?)?;
    queues.pause(&topic, &sub).await?;
    described(&queues, &topic, &sub).await
}

/// Resume a paused subscription (idempotent): it delivers again.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions/{sub}/resume", tag = "queues",
    operation_id = "resumeSubscription", params(SubParams), responses((status = 200,
        description = "Active: the subscription as describe shows it", body = answers::SubscriptionDescription,
        example = ex::subscription_description), errors::ChangeState))]
pub async fn resume(
    State(queues): State<Queues>,
    Path((topic, sub)): SubPath,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let _: NoFields = parse_optional(&read_body(body, MAX_BODY).await?)?;
    queues.resume(&topic, &sub).await?;
    described(&queues, &topic, &sub).await
}
