//! Sluice's domain: topics, the Kafka-compatible partitioner, the segment codec,
//! and the log (publish with group commit, replay, offsets by time), written once
//! over two ports: a blob store ([`ObjectStore`]) and a transactional state
//! store ([`StateStore`]). Nothing here knows about HTTP, AWS or SQLite.

pub mod clock;
mod commit;
mod compact;
pub mod compaction;
pub mod error;
pub mod gc;
pub mod groups;
pub mod janitor;
pub mod layout;
pub mod log;
pub mod model;
pub mod names;
pub mod partitioner;
pub mod queues;
pub mod retention;
pub mod segment;
pub mod storage;
pub mod store;
pub mod timeindex;
mod topics;

pub use clock::{Clock, ManualClock, Random, SeededRandom, SystemClock, SystemRandom};
pub use error::Error;
pub use log::{Log, LogConfig, ReadRequest};
pub use model::*;
pub use storage::{BlobRef, ObjectStore, StorageError};
pub use store::StateStore;
