//! The operations, by capability: how a client of each kind starts its next one, and how its
//! answer is checked against the model and folded into it.

mod busy_delete;
mod groups;
mod log;
mod push;
mod queues;
mod schedule;
mod subops;
mod upkeep;
