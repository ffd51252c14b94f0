//! Scheduled delivery over HTTP: `deliver_at_ms` and `delay_ms` in a JSON batch, the
//! `deliverat` and `delayms` CloudEvents attributes; every refusal a 400 with nothing
//! written; replay shows the schedule at once, a receive does not deliver before it.

use crate::common::{client, post_json, read_all, Server};
use crate::publish;
use serde_json::{json, Value};

const HOUR: i64 = 3_600_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn given_scheduled_events_then_replay_shows_their_schedule_and_a_receive_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    let created = c.put(s.url("/v1/topics/sched")).json(&json!({"partitions": 1, "retention_ms": 24 * HOUR}));
    assert!(created.send().await.unwrap().status().is_success());
    let sub = c.put(s.url("/v1/topics/sched/subscriptions/work")).json(&json!({"start": "earliest"}));
    assert!(sub.send().await.unwrap().status().is_success());
    let at = now_ms() + HOUR;
    let before = now_ms();
    let body = json!({"events": [
        {"value": "absolute", "deliver_at_ms": at, "headers": {"h": "v"}},
        {"value": "relative", "delay_ms": HOUR},
        {"value": "now"},
    ]});
    let (status, answer) = publish(&c, &s, "sched", None, &body).await;
    assert_eq!(status, 200, "{answer}");
    let ce = c
        .post(s.url("/v1/topics/sched/events"))
        .header("ce-specversion", "1.0")
        .header("ce-id", "1")
        .header("ce-source", "test")
        .header("ce-type", "t")
        .header("ce-deliverat", "2100-01-01T00:00:00Z")
        .body("binary")
        .send()
        .await
        .unwrap();
    assert_eq!(ce.status(), 400, "past the retention: refused");
    let structured = json!({"specversion": "1.0", "id": "2", "source": "test", "type": "t", "delayms": 60_000});
    let ce = c.post(s.url("/v1/topics/sched/events")).header("content-type", "application/cloudevents+json");
    assert_eq!(ce.body(structured.to_string()).send().await.unwrap().status(), 200);

    let events = read_all(&c, &s, "sched", 0).await;
    assert_eq!(events.len(), 4);
    assert_eq!(events[0]["deliver_at_ms"], json!(at));
    assert_eq!(events[0]["headers"], json!({"h": "v"}), "the schedule is no header of the event");
    let relative = events[1]["deliver_at_ms"].as_i64().expect("a delay is shown as its time");
    assert!((before + HOUR..=now_ms() + HOUR).contains(&relative), "{relative}");
    assert!(events[2].get("deliver_at_ms").is_none());
    assert!(events[3]["deliver_at_ms"].as_i64().is_some(), "CloudEvents' delayms");

    let received =
        post_json(&c, s.url("/v1/topics/sched/subscriptions/work/receive"), &json!({"max_messages": 10})).await;
    let values: Vec<&Value> = received["messages"].as_array().unwrap().iter().map(|m| &m["value"]).collect();
    assert_eq!(values, [&json!("now")], "only what is due");
    let d: Value = c.get(s.url("/v1/topics/sched/subscriptions/work")).send().await.unwrap().json().await.unwrap();
    assert_eq!(d["backlog"]["scheduled"], 3, "{d}");
}

#[tokio::test]
async fn given_a_bad_schedule_then_400_invalid_event_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    let created = c.put(s.url("/v1/topics/bad-sched")).json(&json!({"partitions": 1, "retention_ms": HOUR}));
    assert!(created.send().await.unwrap().status().is_success());
    let cases = [
        ("both", json!({"value": 1, "deliver_at_ms": now_ms(), "delay_ms": 5})),
        ("a negative delay", json!({"value": 1, "delay_ms": -1})),
        ("past the retention", json!({"value": 1, "delay_ms": HOUR + 60_000})),
        ("the reserved header", json!({"value": 1, "headers": {"sluice-deliver-at-ms": "5"}})),
    ];
    for (why, event) in cases {
        let (status, answer) = publish(&c, &s, "bad-sched", None, &json!({"events": [{"value": 0}, event]})).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("invalid_event")), "{why}: {answer}");
    }
    assert!(read_all(&c, &s, "bad-sched", 0).await.is_empty(), "nothing written");
}
