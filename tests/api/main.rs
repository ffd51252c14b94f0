//! The HTTP contract through a listening server: idempotent retries, and the
//! bad-input matrix (each case its documented 4xx JSON error, nothing changed; the
//! topics API's cases are in `bad_input.rs`).

mod bad_input;
mod bounds;
#[path = "../common/mod.rs"]
mod common;
mod rate;
mod schedule;

use base64::Engine;
use common::{client, create_topic, Server};
use serde_json::{json, Value};

async fn publish(c: &reqwest::Client, s: &Server, topic: &str, key: Option<&str>, body: &Value) -> (u16, Value) {
    let mut req = c.post(s.url(&format!("/v1/topics/{topic}/events"))).json(body);
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Everything a client could observe about storage: the topic list and each topic's partitions.
async fn snapshot(c: &reqwest::Client, s: &Server) -> Value {
    let topics: Value = c.get(s.url("/v1/topics")).send().await.unwrap().json().await.unwrap();
    let mut described = Vec::new();
    for t in topics["topics"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        described
            .push(c.get(s.url(&format!("/v1/topics/{name}"))).send().await.unwrap().json::<Value>().await.unwrap());
    }
    json!({ "topics": topics, "described": described })
}

#[tokio::test]
async fn given_same_idempotency_key_when_retried_then_same_offsets_and_nothing_new_written() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "pay", 3).await;
    let body = json!({ "events": [{ "key": "a", "value": 1 }, { "key": "b", "value": 2 }, { "value": 3 }] });

    let (status, first) = publish(&c, &s, "pay", Some("req-1"), &body).await;
    assert_eq!(status, 200);
    let after_first = snapshot(&c, &s).await;
    let (status, again) = publish(&c, &s, "pay", Some("req-1"), &body).await;
    assert_eq!(status, 200);
    assert_eq!(again, first);
    assert_eq!(snapshot(&c, &s).await, after_first, "a retry wrote something");

    // Concurrent retries of one new request: all get one answer, the events are written once.
    let retries: Vec<_> = (0..8)
        .map(|_| {
            let (c, url, body) = (c.clone(), s.url("/v1/topics/pay/events"), body.clone());
            tokio::spawn(async move {
                c.post(url)
                    .header("Idempotency-Key", "req-2")
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut answers = Vec::new();
    for r in retries {
        answers.push(r.await.unwrap());
    }
    assert!(answers.iter().all(|a| *a == answers[0]), "concurrent retries got different answers: {answers:?}");
    let described: Value = c.get(s.url("/v1/topics/pay")).send().await.unwrap().json().await.unwrap();
    let total: u64 =
        described["partition_states"].as_array().unwrap().iter().map(|p| p["high_watermark"].as_u64().unwrap()).sum();
    assert_eq!(total, 6, "two distinct requests of three events each");

    // The same key with a different request is a conflict, not a silent replay.
    let (status, err) = publish(&c, &s, "pay", Some("req-1"), &json!({ "events": [{ "value": "other" }] })).await;
    assert_eq!(status, 409);
    assert_eq!(err["error"]["code"], "idempotency_key_reused");
}

#[tokio::test]
async fn given_bad_input_when_sent_then_documented_4xx_json_and_no_state_change() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "t", 2).await;
    let ok = publish(
        &c,
        &s,
        "t",
        None,
        &json!({ "events": [{ "value": 1, "partition": 0 }, { "value": 2, "partition": 0 }] }),
    )
    .await;
    assert_eq!(ok.0, 200);
    let before = snapshot(&c, &s).await;

    for case in bad_input::bad_writes().into_iter().chain(bad_input::bad_reads()) {
        bad_input::refused_as_documented(&c, &s, case).await;
    }
    for (method, path, content_type, body) in bad_input::not_json() {
        let r = c.request(method.clone(), s.url(path)).header("content-type", content_type).body(body);
        let r = r.send().await.unwrap();
        let got = (r.status().as_u16(), r.json::<Value>().await.unwrap());
        let what = format!("{method} {path} as {content_type}: {}", got.1);
        assert_eq!((got.0, got.1["error"]["code"].as_str()), (415, Some("unsupported_media_type")), "{what}");
    }
    for key in ["", "has space", "a\tb", &"k".repeat(256)] {
        let r = c
            .post(s.url("/v1/topics/t/events"))
            .header("Idempotency-Key", key)
            .json(&json!({ "events": [{ "value": 1 }] }));
        let r = r.send().await.unwrap();
        let got = (r.status().as_u16(), r.json::<Value>().await.unwrap());
        assert_eq!(
            (got.0, got.1["error"]["code"].as_str()),
            (400, Some("invalid_idempotency_key")),
            "{key:?}: {}",
            got.1
        );
    }
    for (content_type, body, status, code) in bad_input::bad_cloudevents() {
        let r = c.post(s.url("/v1/topics/t/events")).header("content-type", content_type).body(body.clone());
        let r = r.send().await.unwrap();
        let got = (r.status().as_u16(), r.json::<Value>().await.unwrap());
        assert_eq!((got.0, got.1["error"]["code"].as_str()), (status, Some(code)), "{content_type} {body}: {}", got.1);
    }

    assert_eq!(snapshot(&c, &s).await, before, "a rejected request changed state");
}

#[tokio::test]
async fn given_offset_past_high_watermark_when_read_then_416_names_the_bounds() {
    // Only retention (a later issue) moves the log start above 0, so "below the log start" is
    // covered by the same check in the core; here the error must name both bounds.
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "r", 1).await;
    let r = c.get(s.url("/v1/topics/r/partitions/0/events?offset=1")).send().await.unwrap();
    assert_eq!(r.status(), 416);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"]["log_start_offset"], 0);
    assert_eq!(err["error"]["high_watermark"], 0);
}

#[tokio::test]
async fn given_reader_waiting_when_event_published_then_long_poll_returns_it() {
    // Polls re-read the head every 10 minutes: a poll that is waiting when the publish lands
    // returns within the test's patience only if the publish wakes it.
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(dir.path(), &[("SLUICE_POLL_INTERVAL_MS", "600000")]);
    let c = client();
    create_topic(&c, &s, "lp", 1).await;
    // Three rounds: a publish racing ahead of a poll's first read (which would pass without a
    // wake-up) in all three is vanishingly unlikely.
    for offset in 0..3u64 {
        let reader = {
            let (c, url) =
                (c.clone(), s.url(&format!("/v1/topics/lp/partitions/0/events?offset={offset}&wait_ms=20000")));
            tokio::spawn(async move { c.get(url).send().await.unwrap().json::<Value>().await.unwrap() })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!reader.is_finished(), "nothing published yet: the poll waits");
        let value = format!("wake {offset}");
        let (status, _) = publish(&c, &s, "lp", None, &json!({ "events": [{ "value": value }] })).await;
        assert_eq!(status, 200);
        let page = tokio::time::timeout(std::time::Duration::from_secs(10), reader)
            .await
            .expect("the long poll was not woken by the publish")
            .unwrap();
        assert_eq!(page["events"][0]["value"], value.as_str());
        assert_eq!(page["events"][0]["offset"], offset);
    }
}

#[tokio::test]
async fn given_cloudevents_in_each_mode_then_accepted_and_replayed_with_their_fields() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "ce", 1).await;
    let url = s.url("/v1/topics/ce/events");
    let envelope = |id: &str| {
        json!({ "specversion": "1.0", "id": id, "source": "/shop", "type": "order.created",
                "partitionkey": format!("key-{id}"), "time": "2026-01-01T00:00:00Z", "data": { "order": id } })
    };
    const TIME_MS: i64 = 1_767_225_600_000;
    let send = |ct: &'static str, body: Vec<u8>| {
        let (c, url) = (c.clone(), url.clone());
        async move {
            let r = c.post(url).header("content-type", ct).body(body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = send("application/cloudevents+json", serde_json::to_vec(&envelope("s1")).unwrap()).await;
    assert_eq!((status, &body["results"][0]["offset"]), (200, &json!(0)), "structured: {body}");
    let batch = json!([envelope("b1"), envelope("b2")]);
    let (status, body) = send("application/cloudevents-batch+json", serde_json::to_vec(&batch).unwrap()).await;
    assert_eq!(status, 200, "batch: {body}");
    assert_eq!(body["results"].as_array().map(Vec::len), Some(2));
    let r = c
        .post(&url)
        .header("ce-specversion", "1.0")
        .header("ce-id", "x1")
        .header("ce-source", "/shop")
        .header("ce-type", "order.paid")
        .header("ce-partitionkey", "key-x1")
        .header("ce-time", "2026-01-01T00:00:01Z")
        .header("content-type", "application/json")
        .body(r#"{"order":"x1"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "binary: {}", r.text().await.unwrap());
    let r = c
        .post(&url)
        .header("ce-specversion", "1.0")
        .header("ce-id", "x2")
        .header("ce-source", "/shop")
        .header("ce-type", "blob")
        .header("content-type", "application/octet-stream")
        .body(vec![0u8, 159, 146, 150])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "binary, bytes: {}", r.text().await.unwrap());

    let events = common::read_all(&c, &s, "ce", 0).await;
    assert_eq!(events.len(), 5);
    let structured = json!({ "content-type": "application/cloudevents+json" });
    for (e, id) in events[..3].iter().zip(["s1", "b1", "b2"]) {
        assert_eq!(e["value"], envelope(id), "the whole event as the value");
        assert_eq!(e["headers"], structured);
        assert_eq!(e["key"], format!("key-{id}"), "partitionkey is the key");
        assert_eq!(e["timestamp_ms"], TIME_MS, "time is the timestamp");
    }
    assert_eq!(events[3]["value"], json!({ "order": "x1" }), "binary: the body as the value");
    assert_eq!(events[3]["key"], "key-x1");
    assert_eq!(events[3]["timestamp_ms"], TIME_MS + 1000);
    let headers = &events[3]["headers"];
    for (name, value) in [("ce_specversion", "1.0"), ("ce_id", "x1"), ("ce_source", "/shop"), ("ce_type", "order.paid")]
    {
        assert_eq!(headers[name], value, "{name} in {headers}");
    }
    assert_eq!(headers["ce_partitionkey"], "key-x1");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(events[4]["value_base64"], "AJ+Slg==", "binary, not JSON: bytes");
    assert_eq!(events[4]["key"], Value::Null);
    assert_eq!(events[4]["headers"]["content-type"], "application/octet-stream");
}

#[tokio::test]
async fn given_idempotent_publish_to_48_partitions_then_accepted_and_to_49_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "wide", 49).await;
    let spread =
        |n: u32| json!({ "events": (0..n).map(|p| json!({ "value": p, "partition": p })).collect::<Vec<_>>() });
    let (status, body) = publish(&c, &s, "wide", Some("k48"), &spread(48)).await;
    assert_eq!(status, 200, "48 partitions fit one write: {body}");
    let before = snapshot(&c, &s).await;
    let (status, body) = publish(&c, &s, "wide", Some("k49"), &spread(49)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("too_many_partitions")), "{body}");
    assert_eq!(snapshot(&c, &s).await, before, "refused before anything is written");
    let (status, body) = publish(&c, &s, "wide", None, &spread(49)).await;
    assert_eq!(status, 200, "without a key, 49 partitions are committed in several writes: {body}");
    let described: Value = c.get(s.url("/v1/topics/wide")).send().await.unwrap().json().await.unwrap();
    let hws: Vec<u64> = described["partition_states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["high_watermark"].as_u64().unwrap())
        .collect();
    let mut expected = vec![2; 48];
    expected.push(1);
    assert_eq!(hws, expected);
}

#[tokio::test]
async fn given_retention_removed_the_first_segments_then_a_read_below_gets_416_naming_the_log_start() {
    // The janitor runs every 100 ms; the topic keeps a second of events, by their timestamps.
    // Timestamps may run a century ahead here, so an event stamped in 2100 outlives the test.
    let dir = tempfile::tempdir().unwrap();
    let env = [("SLUICE_JANITOR_INTERVAL_MS", "100"), ("SLUICE_MAX_TIMESTAMP_AHEAD_MS", "3200000000000")];
    let s = Server::start_with(dir.path(), &env);
    let c = client();
    let r =
        c.put(s.url("/v1/topics/old")).json(&json!({ "partitions": 1, "retention_ms": 1000 })).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let old: Vec<Value> = (0..3).map(|i| json!({ "value": i, "timestamp_ms": 1000 + i })).collect();
    assert_eq!(publish(&c, &s, "old", None, &json!({ "events": old })).await.0, 200);
    let far = json!({ "events": [{ "value": "fresh", "timestamp_ms": 4_102_444_800_000i64 }] });
    assert_eq!(publish(&c, &s, "old", None, &far).await.0, 200, "stamped in 2100: kept");
    // Waits for what it can observe, however long the machine takes to get there.
    let start = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        loop {
            let d: Value = c.get(s.url("/v1/topics/old")).send().await.unwrap().json().await.unwrap();
            let start = d["partition_states"][0]["log_start_offset"].as_u64().unwrap();
            if start > 0 {
                return start;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the janitor applied retention");
    assert_eq!(start, 3, "the old segment went, the fresh one stays");
    let r = c.get(s.url("/v1/topics/old/partitions/0/events?offset=1")).send().await.unwrap();
    assert_eq!(r.status(), 416);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"]["code"], "offset_out_of_range");
    assert_eq!((&err["error"]["log_start_offset"], &err["error"]["high_watermark"]), (&json!(3), &json!(4)), "{err}");
    let page: Value =
        c.get(s.url("/v1/topics/old/partitions/0/events?offset=3")).send().await.unwrap().json().await.unwrap();
    assert_eq!((&page["events"][0]["value"], &page["log_start_offset"]), (&json!("fresh"), &json!(3)));
}

#[tokio::test]
async fn given_events_with_timestamps_when_offset_by_time_then_first_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "ts", 1).await;
    let events: Vec<Value> = [1000, 2000, 3000].iter().map(|t| json!({ "value": t, "timestamp_ms": t })).collect();
    assert_eq!(publish(&c, &s, "ts", None, &json!({ "events": events })).await.0, 200);
    for (query, offset) in [("1500", 1), ("2000", 1), ("0", 0), ("3001", 3), ("earliest", 0), ("latest", 3)] {
        let url = s.url(&format!("/v1/topics/ts/partitions/0/offsets?timestamp_ms={query}"));
        let r: Value = c.get(url).send().await.unwrap().json().await.unwrap();
        assert_eq!(r["offset"], offset, "timestamp_ms={query}");
    }
}

#[tokio::test]
async fn given_topic_lifecycle_when_managed_then_create_is_idempotent_and_delete_removes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    let put = |body: Value| c.put(s.url("/v1/topics/life")).json(&body).send();
    assert_eq!(put(json!({ "partitions": 2, "retention_ms": 60000 })).await.unwrap().status(), 201);
    assert_eq!(put(json!({ "partitions": 2, "retention_ms": 60000 })).await.unwrap().status(), 200);
    let d: Value = c.get(s.url("/v1/topics/life")).send().await.unwrap().json().await.unwrap();
    assert_eq!(d["partitions"], 2);
    assert_eq!(d["retention_ms"], 60000);
    assert_eq!(d["partition_states"].as_array().unwrap().len(), 2);
    assert_eq!(publish(&c, &s, "life", None, &json!({ "events": [{ "value": 1 }] })).await.0, 200);
    assert_eq!(c.delete(s.url("/v1/topics/life")).send().await.unwrap().status(), 204);
    let list: Value = c.get(s.url("/v1/topics")).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["topics"], json!([]));
    // Recreated under the same name, it starts empty.
    assert_eq!(put(json!({ "partitions": 1 })).await.unwrap().status(), 201);
    let d: Value = c.get(s.url("/v1/topics/life")).send().await.unwrap().json().await.unwrap();
    assert_eq!(d["partition_states"][0]["high_watermark"], 0);
}

#[tokio::test]
async fn given_large_binary_events_when_replayed_then_the_rendered_page_fits_a_lambda_response() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "big", 1).await;
    // Eight events of 1 MiB of bytes: 8 MiB stored, over 11 MB once rendered as base64.
    let mib = base64::engine::general_purpose::STANDARD.encode(vec![0xA5u8; 1 << 20]);
    for _ in 0..8 {
        let (status, body) = publish(&c, &s, "big", None, &json!({ "events": [{ "value_base64": mib }] })).await;
        assert_eq!(status, 200, "{body}");
    }
    let url = s.url("/v1/topics/big/partitions/0/events?offset=0&limit=100&max_bytes=6291456");
    let response = c.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await.unwrap();
    assert!(bytes.len() < 6_000_000, "a page of {} bytes would not fit Lambda's 6 MB response", bytes.len());
    let page: Value = serde_json::from_slice(&bytes).unwrap();
    let events = page["events"].as_array().unwrap();
    assert!(!events.is_empty() && events.len() < 8, "{} events", events.len());
    assert_eq!(page["next_offset"], events.len(), "the next page starts where this one stopped");
}

/// Four partitions of 700 KiB binary events: ~3.7 MB rendered per partition, past Lambda's
/// 6 MB response once two partitions' events are answered together.
async fn four_partitions_of_big_events(c: &reqwest::Client, s: &Server, topic: &str) {
    create_topic(c, s, topic, 4).await;
    let value = base64::engine::general_purpose::STANDARD.encode(vec![0x5Au8; 700 << 10]);
    for p in 0..4 {
        for _ in 0..4 {
            let body = json!({ "events": [{ "value_base64": value, "partition": p }] });
            let (status, answer) = publish(c, s, topic, None, &body).await;
            assert_eq!(status, 200, "{answer}");
        }
    }
}

/// The JSON of an answer, which must fit Lambda's 6 MB response.
async fn fitting_a_lambda_response(response: reqwest::Response, what: &str) -> Value {
    let bytes = response.bytes().await.unwrap();
    assert!(bytes.len() < 6_000_000, "a {what} of {} bytes would not fit Lambda's 6 MB response", bytes.len());
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn given_large_binary_events_on_four_partitions_when_polled_then_the_answer_fits_a_lambda_response() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    four_partitions_of_big_events(&c, &s, "big-poll").await;
    let mut seen = 0;
    let mut member: Option<String> = None;
    for _ in 0..20 {
        let mut body = json!({ "topics": ["big-poll"], "max_events": 100, "max_bytes": 6291456 });
        if let Some(m) = &member {
            body["member_id"] = json!(m);
        }
        let response = c.post(s.url("/v1/groups/big/poll")).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let answer = fitting_a_lambda_response(response, "poll").await;
        member = answer["member_id"].as_str().map(str::to_owned);
        let n = answer["events"].as_array().unwrap().len();
        if n == 0 {
            break;
        }
        seen += n;
    }
    assert_eq!(seen, 16, "successive polls answer every event once");
}

#[tokio::test]
async fn given_large_binary_events_on_four_partitions_when_received_then_the_answer_fits_a_lambda_response() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    let created = c.put(s.url("/v1/topics/big-receive/subscriptions/work")).json(&json!({ "start": "earliest" }));
    four_partitions_of_big_events(&c, &s, "big-receive").await;
    assert_eq!(created.send().await.unwrap().status(), 201);
    let mut seen = 0;
    for _ in 0..20 {
        let response = c
            .post(s.url("/v1/topics/big-receive/subscriptions/work/receive"))
            .json(&json!({ "max_messages": 100 }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let answer = fitting_a_lambda_response(response, "receive").await;
        let n = answer["messages"].as_array().unwrap().len();
        if n == 0 {
            break;
        }
        seen += n;
    }
    assert_eq!(seen, 16, "successive receives answer every message once");
}

#[tokio::test]
async fn given_a_poll_answer_lost_when_retried_with_positions_over_http_then_the_same_events_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "retried", 1).await;
    let events: Vec<Value> = (0..5).map(|i| json!({ "value": i })).collect();
    assert_eq!(publish(&c, &s, "retried", None, &json!({ "events": events })).await.0, 200);
    let poll = |body: Value| {
        let (c, url) = (c.clone(), s.url("/v1/groups/retry/poll"));
        async move { c.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let offsets = |answer: &Value| -> Vec<u64> {
        answer["events"].as_array().unwrap().iter().map(|e| e["offset"].as_u64().unwrap()).collect()
    };
    let lost = poll(json!({ "topics": ["retried"], "max_events": 5 })).await;
    assert_eq!(offsets(&lost), vec![0, 1, 2, 3, 4]);
    let member = lost["member_id"].clone();
    let positions = json!([{ "topic": "retried", "partition": 0, "offset": 0 }]);
    let body = json!({ "topics": ["retried"], "member_id": member, "positions": positions, "auto_commit": true });
    let again = poll(body).await;
    assert_eq!(offsets(&again), vec![0, 1, 2, 3, 4], "{again}");
    let group: Value = c.get(s.url("/v1/groups/retry")).send().await.unwrap().json().await.unwrap();
    assert_eq!(group["partitions"][0]["committed_offset"], 0, "{group}");
}

#[tokio::test]
async fn given_bad_group_requests_then_documented_4xx_json_and_no_group_created() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "g-topic", 2).await;
    let post = |path: &str, body: Value| {
        let (c, url) = (c.clone(), s.url(path));
        async move {
            let r = c.post(url).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("/v1/groups/g1/poll", json!({ "topics": [] }), 400, "invalid_topics"),
        ("/v1/groups/g1/poll", json!({ "topics": ["nope"] }), 404, "topic_not_found"),
        ("/v1/groups/g1/poll", json!({ "topics": ["g-topic"], "max_events": 0 }), 400, "invalid_max_events"),
        (
            "/v1/groups/g1/poll",
            json!({ "topics": ["g-topic"], "session_timeout_ms": 10 }),
            400,
            "invalid_session_timeout",
        ),
        ("/v1/groups/g1/poll", json!({ "topics": ["g-topic"], "reset": "none" }), 400, "no_committed_offset"),
        ("/v1/groups/g1/poll", json!({ "topics": ["g-topic"], "reset": "sometimes" }), 400, "invalid_request"),
        ("/v1/groups/g1/poll", json!({ "topics": ["g-topic"], "member_id": "ghost" }), 409, "unknown_member"),
        (
            "/v1/groups/g1/poll",
            json!({ "topics": ["g-topic"], "positions": [
                { "topic": "g-topic", "partition": 0, "offset": 1 },
                { "topic": "g-topic", "partition": 0, "offset": 2 },
            ] }),
            400,
            "duplicate_position",
        ),
        (
            "/v1/groups/g1/poll",
            json!({ "topics": ["g-topic"], "positions": [{ "topic": "g-topic", "offset": 1 }] }),
            400,
            "invalid_request",
        ),
        ("/v1/groups/bad%20name/poll", json!({ "topics": ["g-topic"] }), 400, "invalid_name"),
        ("/v1/groups/g1/commit", json!({ "member_id": "m", "generation": 1, "offsets": [] }), 404, "group_not_found"),
        ("/v1/groups/g1/seek", json!({ "topic": "g-topic", "to": "earliest", "offset": 3 }), 400, "invalid_seek"),
        ("/v1/groups/g1/leave", json!({}), 400, "invalid_request"),
    ];
    for (path, body, status, code) in cases {
        let (got, answer) = post(path, body.clone()).await;
        assert_eq!((got, answer["error"]["code"].as_str()), (status, Some(code)), "{path} {body}: {answer}");
    }
    let groups: Value = c.get(s.url("/v1/groups")).send().await.unwrap().json().await.unwrap();
    assert_eq!(groups, json!({ "groups": [] }), "no refused request created a group");
    let missing = c.get(s.url("/v1/groups/g1")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn given_values_at_the_nesting_limit_when_replayed_then_the_page_parses_with_serde_json_defaults() {
    // The limit keeps a page's own levels plus the value's under serde_json's 128, which the
    // Rust client and the CLI read with.
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "deep", 1).await;
    let deepest: Value = serde_json::from_str(&format!("{}1{}", "[".repeat(64), "]".repeat(64))).unwrap();
    assert_eq!(publish(&c, &s, "deep", None, &json!({ "events": [{ "value": deepest }] })).await.0, 200);
    let text = c.get(s.url("/v1/topics/deep/partitions/0/events?offset=0")).send().await.unwrap().text().await.unwrap();
    let page: Value = serde_json::from_str(&text).expect("a page at the nesting limit parses");
    assert_eq!(page["events"][0]["value"], deepest);
}
