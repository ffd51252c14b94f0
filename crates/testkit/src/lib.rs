//! The test kit: every test crate (the simulation, the conformance suites, the bench's
//! profile, the adapters' tests) takes its storage doubles from here, none writes its own.
//! - [`mem`]: the in-memory backend, [`MemStore`] and [`MemObjects`], honouring both ports'
//!   contracts exactly (they pass the conformance suites every backend passes);
//! - [`clock`]: [`SimClock`], a manual clock whose sleepers wake in a fixed order;
//! - [`layer`]: [`Layered`] and [`LayeredObjects`], which wrap a store so that a double
//!   (counting, failing, cutting the power) writes only the calls it changes.
//!
//! It depends on `sluice-core` alone, so any crate's tests can use it without a cycle.

pub mod clock;
pub mod layer;
pub mod mem;

pub use clock::SimClock;
pub use layer::{Layered, LayeredObjects, ObjectLayer, StateLayer};
pub use mem::{MemObjects, MemStore};
