//! Reads `orders` as a member of the group `billing` until a poll finds nothing new,
//! committing as it goes, then leaves; prints how many events it read.
//!
//! `cargo run -p sluice-client --example group_consumer` (against SLUICE_URL).

use sluice_client::{Client, ConsumerConfig, GroupConsumer};

#[tokio::main]
async fn main() -> Result<(), sluice_client::Error> {
    let url = std::env::var("SLUICE_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    println!("{}", run(&url).await?);
    Ok(())
}

/// The example itself (tests/client.rs runs it against a server of its own).
pub async fn run(url: &str) -> Result<String, sluice_client::Error> {
    let config = ConsumerConfig { wait_ms: 1_000, ..ConsumerConfig::default() };
    let mut consumer = GroupConsumer::new(Client::new(url)?, "billing", &["orders"])
        .with_config(config)
        .on_assign(|partitions| println!("assigned {partitions:?}"))
        .on_revoke(|partitions| println!("revoked {partitions:?}"));
    let mut read = 0;
    loop {
        let events = consumer.poll().await?;
        if events.is_empty() {
            break;
        }
        read += events.len(); // the work: each event's value is in `event.value`
    }
    consumer.leave().await?; // commits what was read
    Ok(format!("read {read} events"))
}
