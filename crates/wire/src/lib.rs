//! `sluice-wire`: Sluice's v1 HTTP API as both ends see it, with none of the engine. The
//! server (`sluice-api`, which renders and documents it), `sluice-core` (which re-exports
//! what it moved here) and `sluice-client` share these:
//! - [`Code`]: every error code, its name and HTTP status;
//! - [`partitioner`]: key → partition, as Kafka's default partitioner (a stored-data
//!   contract: a key's partition never changes);
//! - the request bodies and the answers of each route, by capability ([`topics`], [`read`],
//!   [`groups`], [`queues`]), under the names the OpenAPI document gives them.
//!
//! Requests deny unknown fields (the server refuses them); answers do not (the client
//! ignores what a newer server adds). The server renders its answers by hand (values are
//! copied as stored, see `sluice-api`'s `read::render`), so there these types describe and
//! are never built; the client reads answers with them. A field that is always there but may be `null` is
//! `required` in the document; one that may be absent is not.
//!
//! With the `openapi` feature each type derives utoipa's `ToSchema`, for the server's
//! OpenAPI document (and its `openapi` module). It is off for the client: utoipa and its
//! derive macros would be compiled by every client user for a document it never builds.

mod code;
pub mod groups;
#[cfg(feature = "openapi")]
mod name;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod partitioner;
pub mod queues;
pub mod read;
pub mod secret;
pub mod seek;
pub mod topics;

pub use code::Code;
pub use groups::*;
pub use queues::*;
pub use read::*;
pub use secret::*;
pub use seek::*;
pub use topics::*;
