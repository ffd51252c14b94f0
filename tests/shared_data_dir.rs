//! Two `serve` processes on one data directory (as the Lambda functions under
//! `cargo lambda watch` are): their commits race on the same partitions, and
//! offsets must still be dense with every acknowledged event at its offset.

mod common;

use std::collections::HashMap;

use common::{assert_dense, assert_log_is_acked, client, create_topic, publish_acked, read_all, Server};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_two_processes_on_one_data_dir_when_publishing_to_the_same_partitions_then_offsets_stay_dense() {
    let dir = tempfile::tempdir().unwrap();
    let servers = [Server::start(dir.path()), Server::start(dir.path())];
    let c = client();
    create_topic(&c, &servers[0], "shared", 2).await;

    let mut tasks = Vec::new();
    for client_id in 0..8usize {
        let (c, url) = (c.clone(), servers[client_id % 2].url("/v1/topics/shared/events"));
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in 0..60 {
                let events: Vec<Value> = (0..3)
                    .map(|i| json!({ "partition": (n % 2), "value": format!("c{client_id}-n{n}-i{i}") }))
                    .collect();
                acked.extend(publish_acked(&c, &url, &events).await);
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }

    let mut log: HashMap<(u32, u64), Value> = HashMap::new();
    for p in 0..2 {
        // Read through the other process than most writers used: both must see the same log.
        let events = read_all(&c, &servers[1 - p as usize], "shared", p).await;
        assert_dense(&events);
        for e in events {
            log.insert((p, e["offset"].as_u64().unwrap()), e["value"].clone());
        }
    }
    assert_log_is_acked(&log, &acked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_processes_when_one_deletes_and_recreates_a_topic_then_the_other_never_shows_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Server::start(dir.path()), Server::start(dir.path()));
    let c = client();
    create_topic(&c, &a, "reborn", 1).await;
    let old: Vec<Value> = (0..5).map(|i| json!({ "value": format!("old-{i}") })).collect();
    // Both processes publish and read the old topic, so both hold it in their caches.
    publish_acked(&c, &a.url("/v1/topics/reborn/events"), &old[..3]).await;
    publish_acked(&c, &b.url("/v1/topics/reborn/events"), &old[3..]).await;
    assert_eq!(read_all(&c, &b, "reborn", 0).await.len(), 5);

    let deleted = c.delete(a.url("/v1/topics/reborn")).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    let refused = c.post(b.url("/v1/topics/reborn/events")).json(&json!({"events": [{"value": "late"}]})).send();
    let refused = refused.await.unwrap();
    assert_eq!(refused.status(), 404, "the warm process refuses a publish to the deleted topic at once");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "topic_not_found");

    create_topic(&c, &a, "reborn", 1).await;
    let acked = publish_acked(&c, &b.url("/v1/topics/reborn/events"), &[json!({ "value": "new-0" })]).await;
    assert_eq!(acked[0].1, 0, "the new topic starts at offset 0");
    for server in [&a, &b] {
        let events = read_all(&c, server, "reborn", 0).await;
        assert_dense(&events);
        let values: Vec<&Value> = events.iter().map(|e| &e["value"]).collect();
        assert_eq!(values, vec![&json!("new-0")], "only the new topic's events");
    }
}

/// A `sluice serve` over a directory, killed when dropped (a failed assertion leaves none
/// running), with the lines it printed before its "listening on" one.
struct Serving {
    child: std::process::Child,
    said: Vec<String>,
}

impl Serving {
    fn start(dir: &std::path::Path) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let said = lines.map_while(Result::ok).take_while(|l| !l.starts_with("listening on")).collect();
        Self { child, said }
    }
}

impl Drop for Serving {
    /// SIGKILL: no shutdown runs, as in a crash.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn given_a_serve_on_a_data_dir_when_a_second_starts_there_then_it_says_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let first = Serving::start(dir.path());
    assert_eq!(first.said, Vec::<String>::new(), "alone: nothing to note");
    let second = Serving::start(dir.path());
    let note = format!(
        "note: another sluice serve uses the data directory {}: both serve the same topics (supported; README, \
         Configuration)",
        dir.path().display()
    );
    assert_eq!(second.said, std::slice::from_ref(&note));
    // The first gone (killed), the second is still there for a third.
    drop(first);
    let third = Serving::start(dir.path());
    assert_eq!(third.said, [note]);
    drop((second, third));
    assert_eq!(Serving::start(dir.path()).said, Vec::<String>::new(), "the others gone: alone again");
}
