//! Bounds a request meets or is refused by: a commit's rules (each refusal leaves the
//! group's offsets as they were), and the largest event publish takes, which a replay page
//! still holds.

use base64::Engine;
use serde_json::{json, Value};

use crate::common::{client, create_topic, get_json, post_json, Server};
use crate::publish;

#[tokio::test]
async fn given_a_member_when_commits_break_their_rules_then_each_is_refused_and_its_offsets_stay() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "c-topic", 2).await;
    let polled = post_json(&c, s.url("/v1/groups/cg/poll"), &json!({ "topics": ["c-topic"] })).await;
    let (member, generation) = (polled["member_id"].clone(), polled["generation"].clone());
    let group = || get_json(&c, s.url("/v1/groups/cg"));
    let before = group().await;
    let offset = |p: u32| json!({ "topic": "c-topic", "partition": p, "offset": 0 });
    let commit = |offsets: Vec<Value>| json!({ "member_id": member, "generation": generation, "offsets": offsets });
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("/v1/groups/cg/commit", commit((0..99).map(|_| offset(0)).collect()), 400, "too_many_offsets"),
        ("/v1/groups/cg/commit", commit(vec![offset(0), offset(1), offset(0)]), 400, "duplicate_offset"),
        ("/v1/groups/cg/commit", json!([member, generation, [offset(0)]]), 400, "invalid_request"),
        ("/v1/groups/cg/seek", json!(["c-topic", "earliest"]), 400, "invalid_request"),
    ];
    for (path, body, status, code) in cases {
        let r = c.post(s.url(path)).json(&body).send().await.unwrap();
        let got = (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null));
        assert_eq!((got.0, got.1["error"]["code"].as_str()), (status, Some(code)), "{path}: {}", got.1);
        assert_eq!(group().await, before, "{path} {code} changed the group");
    }
}

#[tokio::test]
async fn given_events_at_every_bound_when_replayed_then_a_page_of_them_fits_the_page_bound_and_parses() {
    // The largest event publish takes: a 1 MiB value of bytes, a 1 KiB key and 64 headers of
    // 256-byte names and 4 KiB values, all control characters (six bytes each in JSON).
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "max", 1).await;
    let control = |n: usize| "\u{1}".repeat(n);
    let headers: serde_json::Map<String, Value> =
        (0..64).map(|i| (format!("{i:02}{}", control(254)), json!(control(4096)))).collect();
    let value = base64::engine::general_purpose::STANDARD.encode(vec![0xA5u8; 1 << 20]);
    let event = json!({ "key": control(1024), "headers": headers, "value_base64": value });
    for _ in 0..3 {
        let (status, body) = publish(&c, &s, "max", None, &json!({ "events": [event] })).await;
        assert_eq!(status, 200, "{body}");
    }
    let url = s.url("/v1/topics/max/partitions/0/events?offset=0&limit=100&max_bytes=6291456");
    let bytes = c.get(url).send().await.unwrap().bytes().await.unwrap();
    assert!(bytes.len() <= 5_500_000, "a page of {} bytes, past the documented 5.5 MB", bytes.len());
    let page: Value = serde_json::from_slice(&bytes).unwrap();
    let events = page["events"].as_array().unwrap();
    assert!(!events.is_empty(), "{}", page["next_offset"]);
    assert_eq!(events[0]["key"], json!(control(1024)));
    assert_eq!(events[0]["headers"].as_object().unwrap().len(), 64);
}
