//! Consumer groups: `POST /v1/groups/{group}/poll`, `…/commit`, `…/leave`,
//! `…/seek`; `GET /v1/groups`, `GET|DELETE /v1/groups/{group}`.

use sluice_core::Code;
use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use sluice_core::groups::{CommitOffset, Groups, PollAnswer, PollRequest, ResetPolicy, SeekTarget, TopicPartition};
use sluice_wire::groups::{
    CommitRequest as Commit, LeaveRequest as Leave, PollRequest as Poll, Reset, SeekRequest as Seek,
};

use crate::body::{parse_object, read_body};

use crate::openapi::answers::{GroupDescription, GroupList, Polled, Sought};
use crate::openapi::params::GroupPath;
use crate::openapi::{errors, examples as ex};
use crate::path::Path;
use crate::read::write_record;
use crate::ApiError;

/// Group requests are small JSON documents.
const MAX_BODY: usize = 256 << 10;
const DEFAULT_MAX_EVENTS: usize = 500;
const DEFAULT_MAX_BYTES: usize = 1 << 20;

/// Join a consumer group or heartbeat, and fetch events of the member's partitions.
#[utoipa::path(post, path = "/v1/groups/{group}/poll", tag = "groups", operation_id = "poll", params(GroupPath),
    request_body(content = Poll, example = ex::poll),
    responses((status = 200, description = "The member and its events", body = Polled, example = ex::polled),
        errors::Poll))]
pub async fn poll(
    State(groups): State<Groups>,
    Path(group): Path<String>,
    deadline: Option<axum::Extension<crate::Deadline>>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: Poll = parse_object(&read_body(body, MAX_BODY).await?)?;
    let (log, deadline) = (groups.log(), deadline.map(|axum::Extension(d)| d));
    let wait_ms = crate::Deadline::cap_wait(
        deadline,
        req.wait_ms,
        log.limits().max_wait_ms,
        sluice_core::Clock::now_ms(log.clock().as_ref()),
    );
    // The core checks the bounds (the same contract for a program embedding it).
    let max_events = req.max_events.unwrap_or(DEFAULT_MAX_EVENTS);
    let max_bytes = req.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
    let positions = match req.positions {
        None => None,
        Some(list) => {
            let mut positions = BTreeMap::new();
            for p in list {
                let tp = TopicPartition { topic: p.topic, partition: p.partition };
                if positions.contains_key(&tp) {
                    let message = format!("{}/{} appears twice in positions", tp.topic, tp.partition);
                    return Err(ApiError::bad_request(Code::DuplicatePosition, message));
                }
                positions.insert(tp, p.offset);
            }
            Some(positions)
        }
    };
    let request = PollRequest {
        group,
        member_id: req.member_id,
        topics: req.topics,
        max_events,
        max_bytes,
        wait_ms,
        reset: match req.reset {
            Reset::Earliest => ResetPolicy::Earliest,
            Reset::Latest => ResetPolicy::Latest,
            Reset::None => ResetPolicy::None,
        },
        session_timeout_ms: req.session_timeout_ms,
        auto_commit: req.auto_commit,
        positions,
        instance_id: req.instance_id,
    };
    let answer = groups.poll(&request).await.map_err(|e| refused(e, &request.group, &headers))?;
    crate::metrics::read("group", answer.events.iter().map(|e| (e.topic.as_str(), &e.event)));
    Ok(([(header::CONTENT_TYPE, "application/json")], render(&answer)).into_response())
}

/// The core's refusal of a poll as an answer, its fault logged (see [`ApiError`]'s `From`) in
/// a `poll` span naming the group and the request's trace. Made only here, for a refusal, as
/// publish's is: a span on every poll (its fields formatted into a string when made, then
/// entered, left and freed) is paid by every member's every cycle for the logs of the few
/// that fail. The checks before the core log nothing above `debug`.
fn refused(e: sluice_core::Error, group: &str, headers: &axum::http::HeaderMap) -> ApiError {
    tracing::info_span!("poll", %group, trace_id = crate::trace::trace_id(headers)).in_scope(|| ApiError::from(e))
}

fn assignment_json(parts: &[TopicPartition]) -> Value {
    Value::Array(parts.iter().map(|tp| json!({ "topic": tp.topic, "partition": tp.partition })).collect())
}

/// Renders a poll's answer by hand, as replay does: values are copied as stored, and a
/// topic's name is escaped once for the run of events it heads. Written into a kept buffer
/// ([`crate::read::ANSWERS`]): a poll of 1,000 events of 1 KiB is about 1.1 MB.
fn render(answer: &PollAnswer) -> bytes::Bytes {
    let size: usize = answer.events.iter().map(|e| e.event.record.approx_size() * 4 / 3 + e.topic.len() + 112).sum();
    let assignment: usize = answer.assignment.iter().map(|tp| tp.topic.len() + 40).sum();
    let mut out = crate::read::ANSWERS.take(size + assignment + answer.member_id.len() + 96);
    out.extend_from_slice(b"{\"member_id\":");
    crate::read::write_str(&mut out, &answer.member_id);
    crate::read::write_int(&mut out, ",\"generation\":", answer.generation);
    out.extend_from_slice(b",\"assignment\":[");
    for (i, tp) in answer.assignment.iter().enumerate() {
        out.extend_from_slice(if i == 0 { b"{\"topic\":" } else { b",{\"topic\":" });
        crate::read::write_str(&mut out, &tp.topic);
        crate::read::write_int(&mut out, ",\"partition\":", tp.partition);
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"events\":[");
    // The escaped name of the topic of the events being written: a poll's events come in
    // runs of one partition's.
    let (mut topic, mut escaped) = (None, Vec::new());
    for (i, e) in answer.events.iter().enumerate() {
        if topic != Some(e.topic.as_str()) {
            escaped.clear();
            crate::read::write_str(&mut escaped, &e.topic);
            topic = Some(e.topic.as_str());
        }
        out.extend_from_slice(if i == 0 { b"{\"topic\":" } else { b",{\"topic\":" });
        out.extend_from_slice(&escaped);
        crate::read::write_int(&mut out, ",\"partition\":", e.event.partition);
        crate::read::write_int(&mut out, ",\"offset\":", e.event.offset);
        out.push(b',');
        write_record(&mut out, &e.event.record);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    crate::read::ANSWERS.freeze(out)
}

/// Commit offsets, fenced by generation and ownership.
#[utoipa::path(post, path = "/v1/groups/{group}/commit", tag = "groups", operation_id = "commit", params(GroupPath),
    request_body(content = Commit, example = ex::commit),
    responses((status = 204, description = "Committed"), errors::Commit))]
pub async fn commit(
    State(groups): State<Groups>,
    Path(group): Path<String>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let req: Commit = parse_object(&read_body(body, MAX_BODY).await?)?;
    let offsets: Vec<CommitOffset> = req
        .offsets
        .into_iter()
        .map(|o| CommitOffset { topic: o.topic, partition: o.partition, offset: o.offset, metadata: o.metadata })
        .collect();
    groups.commit(&group, &req.member_id, req.generation, &offsets).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Leave the group at once: the member's partitions go to the others.
#[utoipa::path(post, path = "/v1/groups/{group}/leave", tag = "groups", operation_id = "leave", params(GroupPath),
    request_body(content = Leave, example = ex::leave),
    responses((status = 204, description = "Left"), errors::Leave))]
pub async fn leave(
    State(groups): State<Groups>,
    Path(group): Path<String>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let req: Leave = parse_object(&read_body(body, MAX_BODY).await?)?;
    groups.leave(&group, &req.member_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Move committed offsets (of one topic, or every topic the group reads): to an end, an offset or a time.
#[utoipa::path(post, path = "/v1/groups/{group}/seek", tag = "groups", operation_id = "seek", params(GroupPath),
    request_body(content = Seek, example = ex::seek),
    responses((status = 200, description = "The offsets moved", body = Sought, example = ex::sought), errors::Seek))]
pub async fn seek(
    State(groups): State<Groups>,
    Path(group): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let req: Seek = parse_object(&read_body(body, MAX_BODY).await?)?;
    let target = match (req.to.as_deref(), req.offset, req.timestamp_ms) {
        (Some("earliest"), None, None) => SeekTarget::Earliest,
        (Some("latest"), None, None) => SeekTarget::Latest,
        (None, Some(o), None) => SeekTarget::Offset(o),
        (None, None, Some(t)) => SeekTarget::Timestamp(t),
        _ => {
            return Err(ApiError::bad_request(
                Code::InvalidSeek,
                "give exactly one of \"to\": \"earliest\"|\"latest\", \"offset\" or \"timestamp_ms\"",
            ))
        }
    };
    let topics = match req.topic {
        Some(t) => vec![t],
        None => {
            let mut names: Vec<String> =
                groups.describe(&group).await?.partitions.into_iter().map(|p| p.topic).collect();
            names.dedup();
            names
        }
    };
    if req.partitions.is_some() && topics.len() != 1 {
        return Err(ApiError::bad_request(Code::InvalidSeek, "\"partitions\" needs one \"topic\""));
    }
    let mut moved = Vec::new();
    for topic in topics {
        for (partition, offset) in groups.seek(&group, &topic, req.partitions.as_deref(), target).await? {
            moved.push(json!({ "topic": topic, "partition": partition, "offset": offset }));
        }
    }
    Ok(Json(json!({ "offsets": moved })))
}

/// List consumer groups, by name.
#[utoipa::path(get, path = "/v1/groups", tag = "groups", operation_id = "listGroups",
    responses((status = 200, description = "Every group", body = GroupList, example = ex::groups), errors::ListGroups))]
pub async fn list(State(groups): State<Groups>) -> Result<Json<Value>, ApiError> {
    let names = groups.list().await?;
    Ok(Json(json!({ "groups": names })))
}

/// Describe a group: members, and per partition the committed offset and lag.
#[utoipa::path(get, path = "/v1/groups/{group}", tag = "groups", operation_id = "describeGroup", params(GroupPath),
    responses((status = 200, description = "The group", body = GroupDescription, example = ex::group),
        errors::DescribeGroup))]
pub async fn describe(State(groups): State<Groups>, Path(group): Path<String>) -> Result<Json<Value>, ApiError> {
    let d = groups.describe(&group).await?;
    let members: Vec<Value> = d
        .members
        .iter()
        .map(|m| {
            json!({
                "member_id": m.member_id,
                "assignment": assignment_json(&m.assignment),
                "session_timeout_ms": m.session_timeout_ms,
                "expires_at_ms": m.expires_at_ms,
            })
        })
        .collect();
    let partitions: Vec<Value> = d
        .partitions
        .iter()
        .map(|p| {
            json!({
                "topic": p.topic,
                "partition": p.partition,
                "committed_offset": p.committed,
                "metadata": p.metadata,
                "log_start_offset": p.log_start_offset,
                "high_watermark": p.high_watermark,
                "lag": p.lag,
                "member_id": p.owner,
            })
        })
        .collect();
    let lag: u64 = d.partitions.iter().map(|p| p.lag).sum();
    Ok(Json(json!({
        "group": d.group,
        "generation": d.generation,
        "members": members,
        "partitions": partitions,
        "lag": lag,
        "offsets_expire_at_ms": d.offsets_expire_at_ms,
    })))
}

/// Delete a group and its committed offsets: refused while it has live members.
#[utoipa::path(delete, path = "/v1/groups/{group}", tag = "groups", operation_id = "deleteGroup", params(GroupPath),
    responses((status = 204, description = "Deleted"), errors::DeleteGroup))]
pub async fn delete(State(groups): State<Groups>, Path(group): Path<String>) -> Result<StatusCode, ApiError> {
    groups.delete(&group).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::groups::GroupEvent;
    use sluice_core::segment::Record;
    use sluice_core::Event;

    fn event(topic: &str, partition: u32, offset: u64) -> GroupEvent {
        let record = Record {
            timestamp_ms: 5,
            key: None,
            headers: Vec::new(),
            value: bytes::Bytes::from_static(b"[1]"),
            value_is_json: true,
        };
        GroupEvent { topic: topic.to_owned(), event: Event { partition, offset, record } }
    }

    #[test]
    fn a_poll_answer_renders_as_json_with_each_event_under_its_own_topic() {
        let answer = PollAnswer {
            member_id: "m\"1".to_owned(),
            generation: 3,
            assignment: vec![
                TopicPartition { topic: "a".to_owned(), partition: 0 },
                TopicPartition { topic: "b\\c".to_owned(), partition: 1 },
            ],
            events: vec![event("a", 0, 7), event("a", 0, 8), event("b\\c", 1, 0), event("a", 0, 9)],
        };
        let v: Value = serde_json::from_slice(&render(&answer)).unwrap();
        let e = |topic: &str, partition: u32, offset: u64| {
            json!({"topic": topic, "partition": partition, "offset": offset, "timestamp_ms": 5, "key": null,
                   "headers": {}, "value": [1]})
        };
        assert_eq!(
            v,
            json!({
                "member_id": "m\"1",
                "generation": 3,
                "assignment": [{"topic": "a", "partition": 0}, {"topic": "b\\c", "partition": 1}],
                "events": [e("a", 0, 7), e("a", 0, 8), e("b\\c", 1, 0), e("a", 0, 9)],
            })
        );
        let empty = PollAnswer { member_id: "m".to_owned(), generation: 1, assignment: Vec::new(), events: Vec::new() };
        let v: Value = serde_json::from_slice(&render(&empty)).unwrap();
        assert_eq!(v, json!({"member_id": "m", "generation": 1, "assignment": [], "events": []}));
    }
}
