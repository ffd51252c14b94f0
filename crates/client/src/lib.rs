//! `sluice-client`: an async Rust client for Sluice's v1 HTTP API, against `sluice serve`
//! or the AWS deployment (with the `aws` feature, requests are signed with SigV4).
//!
//! - [`Client`]: the connection, and one method per route (topics, publish, replay,
//!   subscriptions, receive/ack/nack/visibility, dead letters, groups);
//! - [`Producer`]: batched, concurrent, idempotent publishing with backpressure;
//! - [`GroupConsumer`]: a consumer group member's loop (join, heartbeat, positions,
//!   commit, rebalance callbacks, leave);
//! - [`Worker`]: a work queue's loop (bounded concurrency, acks riding on receives,
//!   visibility extension, nacks with the subscription's backoff).
//!
//! # Retries
//! A call is sent again after a transient failure (no answer, `429`, `502`–`504`; after
//! the server's `Retry-After` when it sends one) only where a second application cannot
//! do what the first did not mean to:
//! - reads, creates (idempotent by settings), commits (fenced, never backwards), seeks,
//!   leaves, acks/nacks/visibility (the server answers a retry `ok` for a message its
//!   first attempt settled, and `stale_receipt` only when this settle did not happen), receives (a lost answer's messages come
//!   back after their visibility timeout), group polls (with positions, a retried poll
//!   answers the same events), deletes (a retry's `404` is reported done), purges and
//!   unbounded redrives;
//! - a publish only with an `Idempotency-Key` ([`Producer`] always sends one); a secret
//!   rotation only to a given secret (a generated one never); a bounded redrive never.
//!
//! Errors carry the API's code: [`Error::code`].
//!
//! # Example
//! A producer, a member of the group `billing` and a worker on the subscription
//! `emails`, against `sluice serve` (`http://127.0.0.1:8080`); `crates/client/examples/`
//! has each as a program of its own.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use serde_json::json;
//! use sluice_client::{Client, GroupConsumer, Message, Nack, Producer, TopicSettings, Worker};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), sluice_client::Error> {
//!     let client = Client::new("http://127.0.0.1:8080")?;
//!     client.create_topic("orders", &TopicSettings::partitions(4)).await?; // 200 if it exists alike
//!     client.create_subscription("orders", "emails", &json!({"start": "earliest"})).await?;
//!
//!     let producer = Producer::new(client.clone()); // batched, idempotent, in order per topic
//!     for n in 0..10 {
//!         let key = format!("customer-{}", n % 3);
//!         producer.send("orders", Some(&key), json!({"order": n, "total": 9.5}), []).await?;
//!     }
//!     producer.flush().await?;
//!
//!     let mut consumer = GroupConsumer::new(client.clone(), "billing", &["orders"]);
//!     for event in consumer.poll().await? { // a later poll commits this one's events
//!         println!("{}/{} {:?}", event.partition, event.offset, event.value);
//!     }
//!     consumer.leave().await?; // commits, then hands the partitions over
//!
//!     let handler = |message: Message| async move {
//!         match message.event.value.as_ref().and_then(|v| v["total"].as_f64()) {
//!             Some(_) => Ok(()), // acked
//!             None => Err(Nack::after(Duration::from_secs(5))), // again in 5 s
//!         }
//!     };
//!     let stop = tokio::time::sleep(Duration::from_secs(2)); // or tokio::signal::ctrl_c()
//!     let stats = Worker::new(client, "orders", "emails").run(handler, stop).await?;
//!     println!("acked {}, nacked {}", stats.acked, stats.nacked);
//!     Ok(())
//! }
//! ```

mod admin;
mod client;
mod consumer;
mod error;
mod producer;
mod queues;
#[cfg(feature = "aws")]
mod sigv4;
mod types;
mod worker;

pub use client::{Client, ClientBuilder, RetryPolicy};
pub use consumer::{ConsumerConfig, GroupConsumer};
pub use error::Error;
pub use producer::{Delivery, Producer, ProducerConfig};
pub use queues::{Receive, Received};
/// The API's documents, every answer as the server documents it.
pub use sluice_wire as wire;
pub use sluice_wire::Code;
pub use types::*;
pub use worker::{Nack, Worker, WorkerConfig, WorkerStats};

/// The README's example compiles (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
