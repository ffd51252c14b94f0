//! End to end through a listening server: concurrent keyed publishes, then a full replay.

mod common;

use std::collections::HashMap;

use common::{assert_dense, assert_log_is_acked, client, create_topic, publish_acked, read_all, Server};
use serde_json::{json, Value};
use sluice_core::partitioner::partition_for_key;

const CLIENTS: usize = 8;
const EVENTS: usize = 10_000;
const BATCH: usize = 10;
const PARTITIONS: u32 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_eight_concurrent_clients_when_replayed_then_every_acked_event_is_at_its_offset_in_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = client();
    create_topic(&c, &server, "orders", PARTITIONS).await;

    let mut tasks = Vec::new();
    for client_id in 0..CLIENTS {
        let (c, url) = (c.clone(), server.url("/v1/topics/orders/events"));
        tasks.push(tokio::spawn(async move {
            // Each client owns 16 keys and numbers the events of each key, to check order later.
            let mut seq: HashMap<String, u64> = HashMap::new();
            let mut acked = Vec::new();
            for batch in 0..EVENTS / CLIENTS / BATCH {
                let events: Vec<Value> = (0..BATCH)
                    .map(|i| {
                        let key = format!("c{client_id}-k{}", (batch * BATCH + i) % 16);
                        let n = seq.entry(key.clone()).or_default();
                        *n += 1;
                        json!({ "key": key, "value": { "key": key, "seq": *n, "client": client_id } })
                    })
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
    assert_eq!(acked.len(), EVENTS);

    let mut log: HashMap<(u32, u64), Value> = HashMap::new();
    let mut total = 0;
    for p in 0..PARTITIONS {
        let events = read_all(&c, &server, "orders", p).await;
        assert_dense(&events);
        total += events.len();
        let mut last_seq: HashMap<String, u64> = HashMap::new();
        for e in events {
            let key = e["key"].as_str().unwrap().to_owned();
            assert_eq!(partition_for_key(key.as_bytes(), PARTITIONS), p, "key {key} on the wrong partition");
            let seq = e["value"]["seq"].as_u64().unwrap();
            let prev = last_seq.insert(key.clone(), seq).unwrap_or(0);
            assert_eq!(seq, prev + 1, "key {key}: seq {seq} after {prev}");
            log.insert((p, e["offset"].as_u64().unwrap()), e["value"].clone());
        }
    }
    assert_eq!(total, EVENTS);
    assert_log_is_acked(&log, &acked);
}
