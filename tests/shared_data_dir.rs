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
