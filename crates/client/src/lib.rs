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
//! - a publish only with an `Idempotency-Key` ([`Producer`] always sends one); a bounded
//!   redrive never.
//!
//! Errors carry the API's code: [`Error::code`].

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
