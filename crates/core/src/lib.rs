//! Sluice's domain: topics, the Kafka-compatible partitioner, the segment codec,
//! and the log (publish with group commit, replay, offsets by time) over two
//! storage traits. Nothing here knows about HTTP, AWS or SQLite.

pub mod clock;
mod commit;
pub mod error;
pub mod log;
pub mod model;
pub mod names;
pub mod partitioner;
pub mod segment;
pub mod storage;

pub use clock::{Clock, SystemClock};
pub use error::Error;
pub use log::{Log, LogConfig, ReadRequest};
pub use model::*;
pub use storage::{MetaStore, ObjectStore, StorageError};
