//! Starts a real `sluice serve` on a free loopback port, for tests that need a listening server.
#![allow(dead_code)] // each test binary uses a different part of this helper

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// A `sluice serve` child process; killed when dropped.
pub struct Server {
    child: Child,
    pub base: String,
}

impl Server {
    pub fn start(data_dir: &Path) -> Self {
        Self::start_with(data_dir, &[])
    }

    /// [`Server::start`] with these environment variables set (`SLUICE_*` settings).
    pub fn start_with(data_dir: &Path, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sluice serve");
        let stdout = child.stdout.take().expect("stdout piped");
        let mut lines = BufReader::new(stdout).lines();
        let base = loop {
            let line = lines.next().expect("server exited before listening").expect("read server stdout");
            if let Some(addr) = line.strip_prefix("listening on ") {
                break addr.trim().to_owned();
            }
        };
        // Read on: with the pipe closed, the server's later log lines would fail ("Broken pipe").
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|line| eprintln!("{line}")));
        Self { child, base }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGKILL: no shutdown hook runs, as in a crash.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).pool_max_idle_per_host(64).build().expect("client")
}

pub async fn create_topic(c: &reqwest::Client, s: &Server, topic: &str, partitions: u32) {
    let r =
        c.put(s.url(&format!("/v1/topics/{topic}"))).json(&json!({ "partitions": partitions })).send().await.unwrap();
    assert!(r.status().is_success(), "create topic: {}", r.status());
}

/// POSTs `body` as JSON; the answer's JSON.
pub async fn post_json(c: &reqwest::Client, url: String, body: &Value) -> Value {
    c.post(url).json(body).send().await.unwrap().json().await.unwrap()
}

/// GETs `url`; the answer's JSON.
pub async fn get_json(c: &reqwest::Client, url: String) -> Value {
    c.get(url).send().await.unwrap().json().await.unwrap()
}

/// Every event of a partition, read page by page from offset 0 to the high watermark.
pub async fn read_all(c: &reqwest::Client, s: &Server, topic: &str, partition: u32) -> Vec<Value> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let url = s.url(&format!("/v1/topics/{topic}/partitions/{partition}/events?offset={offset}&limit=1000"));
        let page: Value = c.get(url).send().await.unwrap().json().await.unwrap();
        let events = page["events"].as_array().expect("events array").clone();
        if events.is_empty() {
            assert_eq!(page["next_offset"], page["high_watermark"], "empty page before the high watermark");
            return out;
        }
        offset = page["next_offset"].as_u64().unwrap();
        out.extend(events);
    }
}

/// Asserts offsets are exactly 0, 1, 2, … and returns the events.
pub fn assert_dense(events: &[Value]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["offset"].as_u64(), Some(i as u64), "offsets not dense at index {i}");
    }
}

/// An acknowledged event: (partition, offset, the value published).
pub type Acked = (u32, u64, Value);

/// Publishes `events` and answers each one's acknowledged place; panics unless the publish succeeds.
pub async fn publish_acked(c: &reqwest::Client, url: &str, events: &[Value]) -> Vec<Acked> {
    let r = c.post(url).json(&json!({ "events": events })).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let results = body["results"].as_array().expect("results");
    assert_eq!(results.len(), events.len());
    events
        .iter()
        .zip(results)
        .map(|(e, res)| {
            (res["partition"].as_u64().unwrap() as u32, res["offset"].as_u64().unwrap(), e["value"].clone())
        })
        .collect()
}

/// Asserts the replayed log (partition, offset → value) holds exactly the acknowledged events.
pub fn assert_log_is_acked(log: &std::collections::HashMap<(u32, u64), Value>, acked: &[Acked]) {
    assert_eq!(log.len(), acked.len(), "the log holds exactly the acknowledged events");
    for (p, offset, value) in acked {
        assert_eq!(log.get(&(*p, *offset)), Some(value), "acknowledged event at {p}/{offset}");
    }
}
