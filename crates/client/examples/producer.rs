//! Publishes 1,000 orders to `orders` (created with 4 partitions if needed) through the
//! batching producer, and prints where the first and last landed.
//!
//! `cargo run -p sluice-client --example producer` (against SLUICE_URL, default
//! http://127.0.0.1:8080).

use serde_json::json;
use sluice_client::{Client, Producer, TopicSettings};

#[tokio::main]
async fn main() -> Result<(), sluice_client::Error> {
    let url = std::env::var("SLUICE_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    println!("{}", run(&url).await?);
    Ok(())
}

/// The example itself (tests/client.rs runs it against a server of its own).
pub async fn run(url: &str) -> Result<String, sluice_client::Error> {
    let client = Client::new(url)?;
    client.create_topic("orders", &TopicSettings::partitions(4)).await?;
    let producer = Producer::new(client);
    let mut deliveries = Vec::new();
    for n in 0..1_000 {
        let key = format!("customer-{}", n % 25);
        let headers = [("source".to_owned(), "example".to_owned())];
        deliveries.push(producer.send("orders", Some(&key), json!({"order": n, "total": 9.5}), headers).await?);
    }
    producer.flush().await?;
    let mut placed = Vec::new();
    for delivery in deliveries {
        placed.push(delivery.await?);
    }
    Ok(format!("published {} orders; first at {:?}, last at {:?}", placed.len(), placed[0], placed[placed.len() - 1]))
}
