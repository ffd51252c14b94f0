//! `sluice-wire`: Sluice's v1 HTTP API as both ends see it, with none of the engine. The
//! server (`sluice-api`, which renders and documents it), `sluice-core` (which re-exports
//! what it stores or answers with) and `sluice-client` share these:
//! - [`Code`]: every error code, its name and HTTP status;
//! - [`partitioner`]: key → partition, as Kafka's default partitioner (a stored-data
//!   contract: a key's partition never changes);
//! - the request and answer documents of each route.
//!
//! With the `openapi` feature each type derives utoipa's `ToSchema`, for the server's
//! OpenAPI document.

mod code;
pub mod groups;
pub mod partitioner;

pub use code::Code;
pub use groups::TopicPartition;
