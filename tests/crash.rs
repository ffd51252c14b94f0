//! kill -9 while clients publish: after a restart every acknowledged event is at
//! its offset, offsets are dense, and no batch is visible in part.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_dense, client, create_topic, post_json, read_all, Server};
use serde_json::{json, Value};

const PARTITIONS: u32 = 4;
const CLIENTS: usize = 8;
const BATCH: usize = 5;
/// Acknowledged events before the kill (in batches of `BATCH`, from every client).
const ENOUGH_ACKS: usize = 200;

/// What one client was acknowledged: (partition, offset, value) of each event.
type Acked = Vec<(u32, u64, Value)>;

/// One client publishing batches of `BATCH` events, one key per batch, until `stop` (or
/// until the server is gone); counts what it is acknowledged in `acks`.
async fn publish_until_stopped(
    c: reqwest::Client,
    url: String,
    client_id: usize,
    stop: Arc<AtomicBool>,
    acks: Arc<AtomicUsize>,
) -> Acked {
    let mut acked = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let batch_id = format!("c{client_id}-b{n}");
        // One key per batch: the whole batch lands on one partition, so it must appear whole or not at all.
        let events: Vec<Value> =
            (0..BATCH).map(|i| json!({ "key": batch_id, "value": { "batch": batch_id, "i": i } })).collect();
        let Ok(r) = c.post(&url).json(&json!({ "events": events })).send().await else { break };
        let Ok(body) = r.json::<Value>().await else { break };
        let Some(results) = body["results"].as_array() else { break };
        for (e, res) in events.iter().zip(results) {
            acked.push((
                res["partition"].as_u64().unwrap() as u32,
                res["offset"].as_u64().unwrap(),
                e["value"].clone(),
            ));
        }
        acks.fetch_add(results.len(), Ordering::SeqCst);
    }
    acked
}

/// The log as a restarted server replays it, by (partition, offset), each partition dense
/// and every batch in it whole and in order.
async fn recovered_log(c: &reqwest::Client, server: &Server) -> HashMap<(u32, u64), Value> {
    let mut log: HashMap<(u32, u64), Value> = HashMap::new();
    for p in 0..PARTITIONS {
        let events = read_all(c, server, "crashy", p).await;
        assert_dense(&events);
        let mut batches: HashMap<String, Vec<u64>> = HashMap::new();
        for e in &events {
            let batch = e["value"]["batch"].as_str().unwrap().to_owned();
            batches.entry(batch).or_default().push(e["value"]["i"].as_u64().unwrap());
            log.insert((p, e["offset"].as_u64().unwrap()), e["value"].clone());
        }
        for (batch, items) in batches {
            assert_eq!(items, (0..BATCH as u64).collect::<Vec<_>>(), "batch {batch} is partial or out of order");
        }
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_kill_9_during_publishes_when_restarted_then_acked_events_survive_and_batches_are_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = client();
    create_topic(&c, &server, "crashy", PARTITIONS).await;

    let stop = Arc::new(AtomicBool::new(false));
    // Events acknowledged so far, over all clients: the kill comes once enough are, however slow the machine.
    let acks = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let url = server.url("/v1/topics/crashy/events");
            tokio::spawn(publish_until_stopped(c.clone(), url, id, stop.clone(), acks.clone()))
        })
        .collect();
    // Killed while every client is still publishing, once enough is acknowledged to prove something.
    let enough = tokio::time::timeout(Duration::from_secs(120), async {
        while acks.load(Ordering::SeqCst) < ENOUGH_ACKS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    enough.await.expect("the clients were acknowledged enough events before the kill");
    assert!(tasks.iter().all(|t| !t.is_finished()), "every client is still publishing at the kill");
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    assert!(acked.len() >= ENOUGH_ACKS, "too few publishes before the crash to prove anything: {}", acked.len());

    let server = Server::start(dir.path());
    let log = recovered_log(&c, &server).await;
    let mut seen = HashSet::new();
    for (p, offset, value) in &acked {
        assert_eq!(log.get(&(*p, *offset)), Some(value), "acknowledged event lost at {p}/{offset}");
        assert!(seen.insert((*p, *offset)), "two acks for {p}/{offset}");
    }

    // The restarted server keeps appending densely after the recovered tail.
    let after = json!({ "events": [{ "value": "after", "partition": 0 }] });
    let r = post_json(&c, server.url("/v1/topics/crashy/events"), &after).await;
    let before = log.keys().filter(|(p, _)| *p == 0).count() as u64;
    assert_eq!(r["results"][0]["offset"].as_u64(), Some(before));
}
