//! Query strings (and paths) of replay and offset lookup, through the real handlers:
//! `GET /v1/topics/{topic}/partitions/` followed by the input, e.g.
//! `0/events?offset=3&limit=2&max_bytes=100` or `2/offsets?timestamp_ms=1704067200000`.
//!
//! The topic is made once: events with out-of-order timestamps in several publishes per
//! partition, then a janitor round (compaction into multi-part segments, a time index),
//! then more publishes past the index. The harness keeps every event it published.
//!
//! Oracle: no panic, no 5xx, a JSON answer (an error document when refused). A replay page
//! starts at the offset asked for, holds at most `limit` events, each the one published at
//! its offset, and its bounds are the partition's; an offset lookup answers the earliest,
//! the latest, or the first offset at or after a time, as a search over the events does.

#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use sluice_core::upkeep::{Janitor, JanitorConfig};
use sluice_core::{Limits, NewEvent, TopicSpec};
use sluice_fuzz::{block_on, call, check_answer, text, VirtualClock};

const TOPIC: &str = "replay";
const PARTITIONS: u32 = 3;
const START_MS: i64 = 1_704_067_200_000;
/// Publishes per partition before the janitor round, and after it.
const INDEXED_ROUNDS: u64 = 6;
const TAIL_ROUNDS: u64 = 2;
/// The replay default when the query gives no limit.
const DEFAULT_LIMIT: usize = 100;

/// An event as published: its timestamp and what a replay renders of it.
struct Published {
    timestamp_ms: i64,
    key: Value,
    value: Value,
}

struct App {
    router: Router,
    /// Per partition, the events by offset.
    events: Vec<Vec<Published>>,
}

/// The `round`-th publish to `partition`: a few events, timestamps going back and forth.
fn batch(partition: u32, round: u64) -> Vec<NewEvent> {
    let count = 1 + (round * 7 + u64::from(partition) * 3) % 9;
    (0..count)
        .map(|i| {
            let n = round * 16 + i;
            let jitter = ((n * 7919 + u64::from(partition) * 104_729) % 2001) as i64 - 1000;
            NewEvent {
                key: (i % 3 != 0).then(|| format!("key-{}", n % 5).into()),
                headers: vec![("n".to_owned(), n.to_string().into())],
                value: format!("{{\"partition\":{partition},\"n\":{n}}}").into(),
                value_is_json: true,
                timestamp_ms: Some(START_MS + n as i64 * 100 + jitter),
                partition: Some(partition),
            }
        })
        .collect()
}

fn app() -> &'static App {
    static APP: OnceLock<App> = OnceLock::new();
    APP.get_or_init(|| {
        block_on(async {
            let clock = Arc::new(VirtualClock::new(START_MS));
            let limits = Limits { max_read_events: 50, max_read_bytes: 4096, max_wait_ms: 1000, ..Limits::default() };
            let log = sluice_fuzz::open_log(&sluice_fuzz::lasting_scratch_dir(), clock.clone(), 2, limits);
            let spec = TopicSpec { partitions: PARTITIONS, retention_ms: None, retention_bytes: None };
            log.create_topic(TOPIC, spec).await.expect("create the topic");
            let mut events: Vec<Vec<Published>> = (0..PARTITIONS).map(|_| Vec::new()).collect();
            for round in 0..INDEXED_ROUNDS + TAIL_ROUNDS {
                if round == INDEXED_ROUNDS {
                    let config = JanitorConfig {
                        default_retention_ms: 100 * 365 * 24 * 3600 * 1000,
                        compaction_target_bytes: 1024,
                        ..JanitorConfig::default()
                    };
                    let janitor = Janitor::new(log.store().clone(), log.objects().clone(), clock.clone(), config);
                    let report = janitor.run(1000).await.expect("a janitor round");
                    assert!(report.segments_merged > 0, "the janitor merged nothing: {report:?}");
                }
                for partition in 0..PARTITIONS {
                    let batch = batch(partition, round);
                    let published: Vec<Published> = batch
                        .iter()
                        .map(|e| Published {
                            timestamp_ms: e.timestamp_ms.unwrap_or_default(),
                            key: e.key.as_ref().map_or(Value::Null, |k| json!(String::from_utf8_lossy(k))),
                            value: serde_json::from_slice(&e.value).expect("JSON values"),
                        })
                        .collect();
                    let positions = log.publish(TOPIC, batch, None).await.expect("publish");
                    let list = &mut events[partition as usize];
                    assert!(positions.iter().all(|p| p.offset as usize >= list.len()), "offsets go back");
                    list.extend(published);
                    assert_eq!(positions.last().map(|p| p.offset as usize + 1), Some(list.len()));
                }
            }
            App { router: sluice_api::read_router(log), events }
        })
    })
}

/// The query's parameters as the handler reads them (the last of a repeated name wins).
fn params(uri: &axum::http::Uri) -> HashMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()).into_owned().collect()
}

fn check_page(app: &App, params: &HashMap<String, String>, page: &Value) {
    let events = page["events"].as_array().expect("a page has events");
    let hw = page["high_watermark"].as_u64().expect("a page has its high watermark");
    assert_eq!(page["log_start_offset"], 0, "nothing was removed from the log: {page}");
    let next = page["next_offset"].as_u64().expect("a page has its next offset");
    let Some(first) = events.first() else {
        assert_eq!(next, hw, "an empty page is at the end: {page}");
        return;
    };
    let partition = first["partition"].as_u64().expect("an event's partition") as usize;
    let published = &app.events[partition];
    assert_eq!(hw, published.len() as u64, "high watermark of partition {partition}");
    let from = first["offset"].as_u64().expect("an event's offset");
    let asked = match params.get("offset").map(String::as_str) {
        None | Some("earliest") => Some(0),
        Some("latest") => Some(hw),
        Some(n) => n.parse().ok(),
    };
    assert_eq!(Some(from), asked, "the page starts elsewhere than asked: {page}");
    let limit = params.get("limit").and_then(|l| l.parse().ok()).unwrap_or(DEFAULT_LIMIT);
    assert!(events.len() <= limit, "{} events over the limit {limit}", events.len());
    assert_eq!(next, from + events.len() as u64, "next offset: {page}");
    for (i, e) in events.iter().enumerate() {
        let offset = from + i as u64;
        assert_eq!(e["offset"], offset, "offsets are consecutive: {page}");
        assert_eq!(e["partition"], partition, "one partition per page: {page}");
        let want = &published[offset as usize];
        let got = (&e["timestamp_ms"], &e["key"], &e["value"]);
        assert_eq!(got, (&json!(want.timestamp_ms), &want.key, &want.value), "event {partition}/{offset}");
    }
}

fn check_offset(app: &App, params: &HashMap<String, String>, answer: &Value) {
    let partition = answer["partition"].as_u64().expect("the answer names its partition") as usize;
    let published = &app.events[partition];
    let offset = answer["offset"].as_u64().expect("the answer has an offset");
    let hw = published.len() as u64;
    let expected = match params.get("timestamp_ms").map(String::as_str) {
        Some("earliest") => 0,
        Some("latest") => hw,
        Some(t) => {
            let t: i64 = t.parse().expect("an accepted timestamp is an integer");
            published.iter().position(|e| e.timestamp_ms >= t).map_or(hw, |o| o as u64)
        }
        None => panic!("an offset lookup without timestamp_ms was accepted: {answer}"),
    };
    assert_eq!(offset, expected, "offset of partition {partition} for {params:?}");
}

async fn run(app: &App, data: &[u8]) {
    let Ok(tail) = std::str::from_utf8(data) else { return };
    let Ok(request) = Request::get(format!("/v1/topics/{TOPIC}/partitions/{tail}")).body(Body::empty()) else {
        return;
    };
    let uri = request.uri().clone();
    let (status, body) = call(&app.router, request).await;
    let answer = check_answer(status, &body);
    if status != StatusCode::OK {
        return;
    }
    let params = params(&uri);
    match uri.path().rsplit('/').next() {
        Some("events") => check_page(app, &params, &answer),
        Some("offsets") => check_offset(app, &params, &answer),
        _ => panic!("{uri} answered 200: {}", text(&body)),
    }
}

fuzz_target!(|data: &[u8]| {
    let app = app();
    block_on(run(app, data));
});
