//! Deterministic simulation of the Sluice core (FoundationDB's simulation, TigerBeetle's
//! VOPR, slatedb's DST): the real log, group commit, consumer groups, work queues and
//! janitor run over in-memory stores (`sluice_testkit`'s `MemStore` and `MemObjects`)
//! behind a seeded fault layer ([`fault`]), driven by many logical clients on one
//! single-threaded scheduler and a manual clock (`SimClock`; [`sim`], the driver), with
//! every answer checked (`checker`, `ops`) against a model (`model`) of what the API
//! promises. A seed decides everything, so a failing seed replays byte for byte.
//! What it checks, capability by capability, is in docs/RELIABILITY.md ("Deterministic
//! simulation"): the log, groups, work queues, push, an operator's pauses, seeks and
//! changes (rate, limits, delay, filter, window) and scheduled publishes.
//!
//! [`scale`] is the other instrument here: the scale model of the AWS deployment
//! (`sluice-sim scale …`), the same core in virtual time at many instances.

mod checker;
pub mod fault;
mod model;
mod ops;
pub mod rng;
pub mod scale;
pub mod sim;
pub mod trace;
mod world;

pub use sim::{run_seed, Options, Outcome, Violation};
