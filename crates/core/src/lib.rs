//! Sluice's domain, written once over two ports ([`ports`]): a blob store
//! ([`ObjectStore`]) and a transactional state store ([`StateStore`]). Nothing
//! here knows about HTTP, AWS or SQLite.
//!
//! A folder per capability:
//! - [`log`]: topics, publish with group commit, replay, offsets by time;
//! - [`groups`]: consumer groups (membership, assignment, commits, seeks);
//! - [`queues`]: work queues over the log (leases, receipts, dead letters);
//! - [`push`]: delivery of push subscriptions to HTTP endpoints and functions;
//! - [`upkeep`]: the janitor (retention, compaction, collection, purges).
//!
//! Small shared pieces stay flat: the clock and randomness, names, the
//! partitioner (sluice-wire's), the segment codec, the stored records' layout, retries,
//! what an event costs a page (`page`: its bytes as Lambda carries the answer), and the byte
//! counts it and the publish's checks make at the CPU's widest vector lanes (`scan`).

pub mod clock;
pub mod error;
pub mod filter;
pub mod groups;
pub mod hash;
pub mod keys;
pub mod layout;
pub mod log;
pub mod metrics;
pub mod model;
pub mod mutation;
pub mod names;
pub(crate) mod page;
pub mod ports;
pub mod push;
pub mod queues;
pub mod retry;
pub(crate) mod scan;
pub mod schedule;
pub mod segment;
pub mod trace;
pub mod upkeep;

/// Kafka's partitioner, which the client shares (sluice-wire holds it).
pub use sluice_wire::partitioner;

pub use clock::{Clock, ManualClock, Random, SeededRandom, SteppingClock, SystemClock, SystemRandom};
pub use error::{Code, Error};
pub use log::{Log, LogConfig, ReadRequest, AWS_INLINE_SEGMENT_BYTES, DEFAULT_INLINE_SEGMENT_BYTES};
pub use model::*;
pub use ports::objects::{BlobRef, ObjectStore, StorageError};
pub use ports::state::StateStore;
