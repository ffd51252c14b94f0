//! Works through the subscription `invoices` of `orders` (created from the earliest
//! event if needed) with 8 handlers at once, until it has been idle for a second; prints
//! what it did.
//!
//! `cargo run -p sluice-client --example worker` (against SLUICE_URL).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice_client::{Client, Message, Nack, Worker, WorkerConfig};
use tokio::sync::Notify;

#[tokio::main]
async fn main() -> Result<(), sluice_client::Error> {
    let url = std::env::var("SLUICE_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    println!("{}", run(&url).await?);
    Ok(())
}

/// The example itself (tests/client.rs runs it against a server of its own).
pub async fn run(url: &str) -> Result<String, sluice_client::Error> {
    let client = Client::new(url)?;
    client.create_subscription("orders", "invoices", &json!({"start": "earliest"})).await?;
    let busy = Arc::new(Notify::new());
    let handled = busy.clone();
    let handler = move |message: Message| {
        handled.notify_one();
        async move {
            let total = message.event.value.as_ref().and_then(|v| v["total"].as_f64());
            match total {
                Some(_) => Ok(()), // the work: write the invoice
                None => Err(Nack::after(Duration::from_secs(5))),
            }
        }
    };
    // Stop once no message came for a second.
    let idle = async move { while tokio::time::timeout(Duration::from_secs(1), busy.notified()).await.is_ok() {} };
    let config = WorkerConfig { concurrency: 8, wait_ms: 500, ..WorkerConfig::default() };
    let stats = Worker::new(client, "orders", "invoices").with_config(config).run(handler, idle).await?;
    Ok(format!("received {}, acked {}, nacked {}", stats.received, stats.acked, stats.nacked))
}
